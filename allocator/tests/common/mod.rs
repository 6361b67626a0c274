//! Shared test fixtures.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test helpers

use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};
use svcplane_allocator::{AllocatorConfig, Allocators};

/// A Service from a JSON `spec`, named `ns/name`.
pub(crate) fn svc(ns: &str, name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": spec,
    }))
    .expect("valid service json")
}

/// Allocators for `--service-cluster-ip-range`/`--service-node-port-range` values.
pub(crate) fn allocators(cidrs: &str, ports: &str, seed: u64) -> Allocators {
    AllocatorConfig::from_flags(cidrs, ports)
        .unwrap()
        .allocators(seed)
        .unwrap()
}

pub(crate) fn spec(s: &Service) -> &k8s_openapi::api::core::v1::ServiceSpec {
    s.spec.as_ref().unwrap()
}

pub(crate) fn cluster_ips(s: &Service) -> Vec<String> {
    spec(s).cluster_ips.clone().unwrap_or_default()
}

pub(crate) fn families(s: &Service) -> Vec<String> {
    spec(s).ip_families.clone().unwrap_or_default()
}

pub(crate) fn node_ports(s: &Service) -> Vec<i32> {
    spec(s)
        .ports
        .iter()
        .flatten()
        .map(|p| p.node_port.unwrap_or(0))
        .collect()
}
