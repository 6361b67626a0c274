//! `ValidateServiceUpdate` additions (WH-8.4), ported from upstream
//! `pkg/apis/core/validation/validation.go`: `validateUpgradeDowngradeClusterIPs`,
//! `validateUpgradeDowngradeIPFamilies`, `validateLoadBalancerClassField` (update part)
//! and `validateServiceExternalTrafficFieldsUpdate`, in that order.
//!
//! Upstream's quirks are kept on purpose so a client cannot tell us from the API
//! server: ipFamilies errors always point at index 0, the value printed for some
//! ipFamilies errors is the clusterIPs list, and causes are not de-duplicated.

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::view::{SINGLE_STACK, SvcView};
use svcplane_allocator::{FieldError, FieldValue};

const MAY_NOT_CHANGE: &str = "may not change once set";

/// The WH-8.4 errors of updating `old` to `new` (both as the API server sees them after
/// allocation), in upstream order.
pub fn validate_update(new: &Service, old: &Service) -> Vec<FieldError> {
    let (n, o) = (SvcView::from_service(new), SvcView::from_service(old));
    let mut errs = upgrade_downgrade_cluster_ips(&n, &o);
    errs.extend(upgrade_downgrade_ip_families(&n, &o));
    errs.extend(load_balancer_class(new, old, &n, &o));
    // validateServiceExternalTrafficFieldsUpdate: the healthCheckNodePort is fixed for
    // as long as the Service needs one. Upstream reports this as Forbidden "field is
    // immutable" (older registry code had an Invalid "cannot change healthCheckNodePort
    // ..." message; current validation.go has the Forbidden form).
    if o.needs_health_check()
        && n.needs_health_check()
        && n.health_check_node_port != o.health_check_node_port
    {
        errs.push(FieldError::forbidden(
            "spec.healthCheckNodePort",
            "field is immutable",
        ));
    }
    errs
}

/// A `[]string` or `[]core.IPFamily` as apimachinery prints it: JSON, and `null`
/// when empty (the API server's decoded object holds nil for an omitted list).
fn string_list(v: &[String]) -> FieldValue {
    FieldValue::StrList((!v.is_empty()).then(|| v.to_vec()))
}

fn single_stack(v: &SvcView) -> bool {
    v.ip_family_policy.as_deref() == Some(SINGLE_STACK)
}

fn upgrade_downgrade_cluster_ips(n: &SvcView, o: &SvcView) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if n.is_external_name() || o.is_external_name() {
        return errs;
    }
    if o.is_headless() && n.is_headless() {
        return errs;
    }
    let (ol, nl) = (o.cluster_ips.len(), n.cluster_ips.len());
    let changed = |i: usize| {
        FieldError::invalid(
            format!("spec.clusterIPs[{i}]"),
            string_list(&n.cluster_ips),
            MAY_NOT_CHANGE,
        )
    };
    if ol == nl {
        for (i, ip) in o.cluster_ips.iter().enumerate() {
            if *ip != n.cluster_ips[i] {
                errs.push(changed(i));
            }
        }
    } else if ol > nl {
        if nl == 0 {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                string_list(&n.cluster_ips),
                "primary clusterIP can not be unset",
            ));
        }
        if ol > 0 && nl > 0 && n.cluster_ips[0] != o.cluster_ips[0] {
            errs.push(changed(0));
        }
        if nl == 1 && !single_stack(n) {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                FieldValue::OptStr(n.ip_family_policy.clone()),
                "must be set to 'SingleStack' when releasing the secondary clusterIP",
            ));
        }
    } else if ol > 0 && n.cluster_ips[0] != o.cluster_ips[0] {
        errs.push(changed(0));
    }
    errs
}

fn upgrade_downgrade_ip_families(n: &SvcView, o: &SvcView) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if n.is_external_name() || o.is_external_name() {
        return errs;
    }
    // Changing to or from headless, and headless itself, may change families freely.
    if n.is_headless() || o.is_headless() {
        return errs;
    }
    let (ol, nl) = (o.ip_families.len(), n.ip_families.len());
    // Upstream prints the clusterIPs list as the value of these two errors.
    let primary_changed = || {
        FieldError::invalid(
            "spec.ipFamilies[0]",
            string_list(&n.cluster_ips),
            MAY_NOT_CHANGE,
        )
    };
    if ol == nl {
        for (i, f) in o.ip_families.iter().enumerate() {
            if *f != n.ip_families[i] {
                errs.push(FieldError::invalid(
                    "spec.ipFamilies[0]",
                    string_list(&n.ip_families),
                    MAY_NOT_CHANGE,
                ));
            }
        }
    } else if ol > nl {
        // Upstream tests clusterIPs here, not ipFamilies.
        if n.cluster_ips.is_empty() {
            errs.push(FieldError::invalid(
                "spec.ipFamilies[0]",
                string_list(&n.ip_families),
                "primary ipFamily can not be unset",
            ));
        }
        if nl > 0 && n.ip_families[0] != o.ip_families[0] {
            errs.push(primary_changed());
        }
        if nl == 1 && !single_stack(n) {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                FieldValue::OptStr(n.ip_family_policy.clone()),
                "must be set to 'SingleStack' when releasing the secondary ipFamily",
            ));
        }
    } else if ol > 0 && nl > 0 && n.ip_families[0] != o.ip_families[0] {
        errs.push(primary_changed());
    }
    errs
}

fn load_balancer_class(new: &Service, old: &Service, n: &SvcView, o: &SvcView) -> Vec<FieldError> {
    let class = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|sp| sp.load_balancer_class.clone())
    };
    let lb = svcplane_allocator::view::TYPE_LOAD_BALANCER;
    let (nc, oc) = (class(new), class(old));
    if n.type_ == lb && o.type_ == lb && nc != oc {
        return vec![FieldError::invalid(
            "spec.loadBalancerClass",
            FieldValue::OptStr(nc),
            MAY_NOT_CHANGE,
        )];
    }
    Vec::new()
}
