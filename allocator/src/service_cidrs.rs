//! Service ranges as the cluster declares them: `networking.k8s.io/v1` ServiceCIDR
//! objects (AL-2.1, AL-3).
//!
//! Since Kubernetes 1.33 a cluster's ClusterIP ranges are these objects, added and
//! removed at run time; `--service-cluster-ip-range` only seeds the default one
//! (`kubernetes`). Upstream keeps one allocator per distinct CIDR string, shared by every
//! object naming it, and lets a range hand out addresses while at least one of those
//! objects is ready: not being deleted, and its `Ready` condition `True` or absent (a
//! cluster without kube-controller-manager's ServiceCIDR controller never sets it).
//! A range none of whose objects is ready still owns its addresses (they stay taken
//! and valid) but hands out nothing.
//!
//! This module turns the objects (as plain views the shell fills in) into that list of
//! ranges; [`crate::Allocators::set_ranges`] applies it to running allocators.

use crate::namespace_selector::{NAMESPACE_SELECTOR, NamespaceSelector, SelectorError};
use crate::range_scope::RangeScope;
use std::collections::BTreeSet;

use crate::range::{Cidr, IpFamily};

/// The name of the ServiceCIDR kube-apiserver creates from its flags.
pub const DEFAULT_SERVICE_CIDR_NAME: &str = "kubernetes";

/// What the allocator needs of one ServiceCIDR object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCidrView {
    /// `metadata.name`.
    pub name: String,
    /// `spec.cidrs` as written.
    pub cidrs: Vec<String>,
    /// `status.conditions[type=Ready]` is `True`, or there is none.
    pub ready_condition: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Its `svcplane.io/namespace-selector` annotation: `None` without one.
    pub namespace_selector: Option<Result<NamespaceSelector, SelectorError>>,
}

impl ServiceCidrView {
    /// The view of a stored object.
    pub fn of(obj: &k8s_openapi::api::networking::v1::ServiceCIDR) -> Self {
        let ready = obj
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_none_or(|c| c.status == "True");
        Self {
            name: obj.metadata.name.clone().unwrap_or_default(),
            cidrs: obj
                .spec
                .as_ref()
                .and_then(|s| s.cidrs.clone())
                .unwrap_or_default(),
            ready_condition: ready,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            namespace_selector: obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(NAMESPACE_SELECTOR))
                .map(|text| NamespaceSelector::parse(text)),
        }
    }

    /// Its selector as a range scope reads it (`Some(None)`: one that does not parse).
    fn selector(&self) -> Option<Option<&NamespaceSelector>> {
        self.namespace_selector.as_ref().map(|r| r.as_ref().ok())
    }

    /// Whether this object lets its CIDRs hand out addresses.
    pub fn serves(&self) -> bool {
        self.ready_condition && !self.deleting
    }
}

/// One distinct CIDR of the cluster and whether new addresses may come from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRange {
    /// The CIDR.
    pub cidr: Cidr,
    /// At least one object naming it serves.
    pub ready: bool,
    /// The objects naming it, by name.
    pub objects: Vec<String>,
    /// The namespaces it serves (from the objects' selectors).
    pub scope: RangeScope,
}

/// The distinct CIDRs the objects declare (in the order of the objects' names, the
/// default `kubernetes` first), each ready while any object naming it serves. A CIDR
/// that does not parse is skipped (the API server validates them; a hand-written dump
/// may not).
pub fn cluster_ranges(objects: &[ServiceCidrView]) -> Vec<ClusterRange> {
    let mut sorted: Vec<&ServiceCidrView> = objects.iter().collect();
    sorted.sort_by(|a, b| {
        (a.name != DEFAULT_SERVICE_CIDR_NAME, &a.name)
            .cmp(&(b.name != DEFAULT_SERVICE_CIDR_NAME, &b.name))
    });
    let mut out: Vec<ClusterRange> = Vec::new();
    for obj in sorted {
        for text in &obj.cidrs {
            let Ok(cidr) = Cidr::parse(text) else {
                continue;
            };
            match out.iter_mut().find(|r| r.cidr == cidr) {
                Some(r) => {
                    r.ready |= obj.serves();
                    r.objects.push(obj.name.clone());
                    r.scope = std::mem::take(&mut r.scope).with_object(&obj.name, obj.selector());
                }
                None => out.push(ClusterRange {
                    cidr,
                    ready: obj.serves(),
                    objects: vec![obj.name.clone()],
                    scope: RangeScope::of_object(&obj.name, obj.selector()),
                }),
            }
        }
    }
    out
}

/// The cluster's primary family: that of the default ServiceCIDR's first CIDR, else of
/// the first range.
pub fn primary_family(objects: &[ServiceCidrView], ranges: &[ClusterRange]) -> Option<IpFamily> {
    objects
        .iter()
        .find(|o| o.name == DEFAULT_SERVICE_CIDR_NAME)
        .and_then(|o| o.cidrs.first())
        .and_then(|c| Cidr::parse(c).ok())
        .map(|c| c.family())
        .or_else(|| ranges.first().map(|r| r.cidr.family()))
}

/// Whether two sets of CIDRs differ (as sets), for the "flags and objects disagree"
/// notice.
pub fn differ(a: &[Cidr], b: &[Cidr]) -> bool {
    let set = |v: &[Cidr]| v.iter().map(|c| c.to_string()).collect::<BTreeSet<_>>();
    set(a) != set(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, cidrs: &[&str], ready: bool, deleting: bool) -> ServiceCidrView {
        ServiceCidrView {
            name: name.into(),
            cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
            ready_condition: ready,
            deleting,
            namespace_selector: None,
        }
    }

    fn shown(r: &[ClusterRange]) -> Vec<(String, bool)> {
        r.iter().map(|r| (r.cidr.to_string(), r.ready)).collect()
    }

    #[test]
    fn rule_3_one_range_per_distinct_cidr_the_default_first() {
        let r = cluster_ranges(&[
            view("extra", &["10.97.0.0/16"], true, false),
            view("kubernetes", &["10.96.0.0/16", "fd00::/112"], true, false),
            view("also", &["10.97.0.0/16"], true, false),
        ]);
        assert_eq!(
            shown(&r),
            [
                ("10.96.0.0/16".into(), true),
                ("fd00::/112".into(), true),
                ("10.97.0.0/16".into(), true)
            ]
        );
        assert_eq!(r[2].objects, ["also", "extra"]);
    }

    #[test]
    fn rule_3_a_range_serves_while_any_of_its_objects_is_ready_and_not_deleting() {
        let r = cluster_ranges(&[
            view("a", &["10.97.0.0/16"], true, true),
            view("b", &["10.97.0.0/16"], false, false),
        ]);
        assert_eq!(shown(&r), [("10.97.0.0/16".into(), false)]);
        let r = cluster_ranges(&[
            view("a", &["10.97.0.0/16"], true, true),
            view("b", &["10.97.0.0/16"], true, false),
        ]);
        assert_eq!(shown(&r), [("10.97.0.0/16".into(), true)]);
    }

    #[test]
    fn rule_3_the_primary_family_is_the_default_objects_first() {
        let objs = [
            view("a", &["10.97.0.0/16"], true, false),
            view("kubernetes", &["fd00::/112", "10.96.0.0/16"], true, false),
        ];
        let r = cluster_ranges(&objs);
        assert_eq!(primary_family(&objs, &r), Some(IpFamily::V6));
        let objs = [view("a", &["10.97.0.0/16"], true, false)];
        assert_eq!(
            primary_family(&objs, &cluster_ranges(&objs)),
            Some(IpFamily::V4)
        );
    }

    #[test]
    fn unparseable_cidrs_are_skipped_and_set_comparison_ignores_order() {
        let r = cluster_ranges(&[view("a", &["nope", "10.1.0.0/24"], true, false)]);
        assert_eq!(shown(&r), [("10.1.0.0/24".into(), true)]);
        let a = [
            Cidr::parse("10.0.0.0/24").unwrap(),
            Cidr::parse("fd00::/112").unwrap(),
        ];
        let b = [a[1], a[0]];
        assert!(!differ(&a, &b));
        assert!(differ(&a, &a[..1]));
    }
}
