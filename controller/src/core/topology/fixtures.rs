//! Builders for topology tests and benches: Nodes with a given CPU and
//! state, and bare EndpointSlices with zoned endpoints. Built on
//! `core::fixtures`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointSlice, ForZone,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::core::fixtures::node;

/// A ready worker Node in `zone` with allocatable `cpu` (a quantity such
/// as `"4"` or `"500m"`; `None` leaves allocatable CPU out).
pub fn cpu_node(name: &str, zone: Option<&str>, cpu: Option<&str>) -> Node {
    let mut n = node(name, zone);
    if let Some(status) = n.status.as_mut() {
        status.allocatable =
            cpu.map(|c| BTreeMap::from([("cpu".to_owned(), Quantity(c.to_owned()))]));
    }
    n
}

/// Sets the Node's `Ready` condition to `status` (`"False"`, `"Unknown"`),
/// or removes every condition with `None`.
pub fn with_ready(mut n: Node, status: Option<&str>) -> Node {
    if let Some(s) = n.status.as_mut() {
        match status {
            None => s.conditions = None,
            Some(v) => {
                for c in s.conditions.iter_mut().flatten() {
                    if c.type_ == "Ready" {
                        c.status = v.to_owned();
                    }
                }
            }
        }
    }
    n
}

/// Adds a label to a Node.
pub fn with_label(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
    n
}

/// An endpoint with one address, a zone, readiness and optional zone hint.
pub fn endpoint(ip: &str, zone: Option<&str>, ready: bool, hint: Option<&str>) -> Endpoint {
    Endpoint {
        addresses: vec![ip.to_owned()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(ready),
            terminating: Some(false),
        }),
        zone: zone.map(str::to_owned),
        node_name: zone.map(|z| format!("node-{z}")),
        hints: hint.map(|h| EndpointHints {
            for_zones: Some(vec![ForZone { name: h.to_owned() }]),
            for_nodes: None,
        }),
        ..Endpoint::default()
    }
}

/// Ready endpoints for `(zone, count)` pairs, without hints, numbered from
/// `first`.
pub fn zoned_endpoints(first: usize, zones: &[(&str, usize)]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    let mut i = first;
    for (zone, count) in zones {
        for _ in 0..*count {
            out.push(endpoint(
                &format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                Some(zone),
                true,
                None,
            ));
            i += 1;
        }
    }
    out
}

/// A named IPv4 slice in `default` holding `endpoints`.
pub fn slice(name: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".to_owned(),
        endpoints: Some(endpoints),
        ports: Some(Vec::new()),
    }
}
