//! The validating endpoint: re-check the final object without leaving a trace.
//!
//! By the time a validating webhook runs, the API server has allocated (WH-10.4), so
//! the object carries its final ClusterIPs and NodePorts. Two things are
//! checked, in upstream's order (allocation errors win over validation errors, WH-8.1):
//!
//! 1. The allocation the API server just did, replayed against svcplane's state with
//!    upstream's static-allocation errors: malformed or wrong-family values, values
//!    outside every configured range (or a network/broadcast address), and values held
//!    by another Service, claim or IPAddress. The replay runs through
//!    [`AllocationState::evaluate`], which frees the values this Service's own holders
//!    have (its IPAddress objects, its claims, its earlier state) and undoes everything
//!    afterwards. On UPDATE only newly taken values are checked, like upstream: a value
//!    kept from the old object was checked when it was taken.
//! 2. The ClusterIP- and NodePort-related rules of `ValidateService` and the WH-8.4
//!    update rules, with upstream's paths and texts. Other rules (ports, selectors,
//!    traffic policies …) are the API server's business.
//!
//! Dry runs skip the replay: upstream's dry-run allocation reserves nothing and invents
//! placeholder values (the CIDR's network address, NodePorts from 32769), which a
//! range check would reject, and a dry run persists nothing that could collide.

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::families::validate_cluster_ips_related_fields;
use svcplane_allocator::view::{SvcView, TYPE_CLUSTER_IP, TYPE_LOAD_BALANCER, TYPE_NODE_PORT};
use svcplane_allocator::{FieldError, FieldValue, ServiceError};

use super::ValidateDecision;
use super::decode::{Operation, ServiceRequest};
use super::update_rules::validate_update;
use crate::state::AllocationState;
use crate::state::hold_kept_values;

/// Validate the final object of `req` against upstream's rules and the state.
pub fn validate(req: &ServiceRequest, state: &mut AllocationState) -> ValidateDecision {
    let old = match req.operation {
        Operation::Update => req.old_service.as_ref(),
        Operation::Create => None,
    };
    if !req.dry_run {
        let mut svc = req.service.clone();
        let namespace = state.namespace_view(&req.service_ref().namespace);
        let replay = state.evaluate(&req.service_ref(), |a| {
            a.for_namespace(&namespace, |a| match old {
                Some(old) => {
                    hold_kept_values(a, old);
                    a.allocate_update(&mut svc, old, false)
                }
                None => a.allocate_create(&mut svc, false),
            })
        });
        if let Err(e) = replay {
            return ValidateDecision::Deny(e);
        }
    }
    let errors = structural_errors(&req.service, old);
    if errors.is_empty() {
        ValidateDecision::Allow {
            warnings: Vec::new(),
        }
    } else {
        ValidateDecision::Deny(ServiceError::Invalid {
            name: req.service.metadata.name.clone().unwrap_or_default(),
            errors,
        })
    }
}

/// Update rules (when `old` is given) followed by [`service_rules`]: upstream's
/// `ValidateServiceUpdate` order, restricted to ClusterIP/NodePort fields.
pub(crate) fn structural_errors(svc: &Service, old: Option<&Service>) -> Vec<FieldError> {
    let mut errs = old.map_or_else(Vec::new, |o| validate_update(svc, o));
    let old_view = old.map(SvcView::from_service);
    errs.extend(service_rules(
        &SvcView::from_service(svc),
        old_view.as_ref(),
    ));
    errs
}

/// The ClusterIP- and NodePort-related rules of upstream `ValidateService`
/// (WH-8.2, WH-8.3), in upstream order; `old` is the stored Service on an update.
pub fn service_rules(v: &SvcView, old: Option<&SvcView>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let headless_first = || FieldValue::Str(v.cluster_ips.first().cloned().unwrap_or_default());
    match v.type_.as_str() {
        TYPE_LOAD_BALANCER if v.is_headless() => errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            headless_first(),
            "may not be set to 'None' for LoadBalancer services",
        )),
        TYPE_NODE_PORT if v.is_headless() => errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            headless_first(),
            "may not be set to 'None' for NodePort services",
        )),
        _ if v.is_external_name() => {
            const NOT_FOR_EXTERNAL_NAME: &str = "may not be set for ExternalName services";
            if !v.cluster_ips.is_empty() {
                errs.push(FieldError::forbidden(
                    "spec.clusterIPs",
                    NOT_FOR_EXTERNAL_NAME,
                ));
            }
            if !v.ip_families.is_empty() {
                errs.push(FieldError::forbidden(
                    "spec.ipFamilies",
                    NOT_FOR_EXTERNAL_NAME,
                ));
            }
            if v.ip_family_policy.is_some() {
                errs.push(FieldError::forbidden(
                    "spec.ipFamilyPolicy",
                    NOT_FOR_EXTERNAL_NAME,
                ));
            }
        }
        _ => {}
    }

    errs.extend(validate_cluster_ips_related_fields(v, old));

    if v.type_ == TYPE_CLUSTER_IP {
        for (i, p) in v.ports.iter().enumerate() {
            if p.node_port != 0 {
                errs.push(FieldError::forbidden(
                    format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }

    // Duplicate NodePorts count per (protocol, nodePort): 53/TCP and 53/UDP may share.
    let mut seen: Vec<(&str, i32)> = Vec::new();
    for (i, p) in v.ports.iter().enumerate() {
        if p.node_port == 0 {
            continue;
        }
        let key = (p.protocol.as_str(), p.node_port);
        if seen.contains(&key) {
            errs.push(FieldError::duplicate(
                format!("spec.ports[{i}].nodePort"),
                FieldValue::Int(i64::from(p.node_port)),
            ));
        }
        seen.push(key);
    }

    // validateServiceExternalTrafficPolicy, healthCheckNodePort part.
    let hc = v.health_check_node_port;
    if !v.needs_health_check() {
        if hc != 0 {
            errs.push(FieldError::invalid(
                "spec.healthCheckNodePort",
                FieldValue::Int(i64::from(hc)),
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
    } else if hc == 0 {
        errs.push(FieldError::required("spec.healthCheckNodePort", ""));
    } else if !(1..=65535).contains(&hc) {
        errs.push(FieldError::invalid(
            "spec.healthCheckNodePort",
            FieldValue::Int(i64::from(hc)),
            "must be between 1 and 65535, inclusive",
        ));
    }
    errs
}
