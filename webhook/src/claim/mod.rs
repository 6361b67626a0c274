//! `AllocationClaim`: the lock that makes handing out a ClusterIP or NodePort atomic
//! across webhook replicas.
//!
//! Before a replica answers a mutation with a value it creates a cluster-scoped
//! `AllocationClaim` whose *name is derived from the value alone* ([`claim_name`]). The
//! API server's create-if-absent gives exactly one winner per name, so two replicas —
//! each with its own, possibly lagging, view of the cluster — can never both hand out the
//! same value. Why not the alternatives (WH-13.3): an `IPAddress` object
//! cannot be the lock while kube-apiserver allocates too, because it would then treat
//! our own Service's address as taken; Lease objects named after values would need a
//! namespace, broad Lease RBAC beside the leader-election Lease, and would show up in
//! every tool that watches Leases. A dedicated kind keeps the permissions narrow and
//! makes claims easy to list and explain (`kubectl get allocationclaims`).
//!
//! A claim lives as long as some Service holds its value; the repair loop deletes the
//! ones whose Service never appeared (a denied, timed-out or failed create) once they are
//! older than a grace period ([`repair`]).

pub mod repair;

use std::net::IpAddr;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use svcplane_allocator::Claim;

use crate::state::{
    ClaimObject, HolderKey, PendingRetention, ServiceRef, StoredRetention, created_seconds,
};

/// API group of svcplane's own resources.
pub const GROUP: &str = "svcplane.io";

/// The specification of an [`AllocationClaim`]: one value and the request that took it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "svcplane.io",
    version = "v1alpha1",
    kind = "AllocationClaim",
    plural = "allocationclaims",
    shortname = "svcclaim",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Value","type":"string","jsonPath":".spec.value"}"#,
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.service.namespace"}"#,
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".spec.service.name"}"#,
    printcolumn = r#"{"name":"Retained-Until","type":"string","jsonPath":".spec.retained.until"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AllocationClaimSpec {
    /// What is claimed.
    pub kind: ClaimKind,
    /// The value: an IP address in canonical form, or a port number.
    pub value: String,
    /// The Service the value was handed to.
    pub service: ClaimedFor,
    /// The AdmissionReview request that handed it out.
    #[serde(default)]
    pub request_uid: String,
    /// Set once the Service was deleted and its value is retained for its name
    /// (`--retain-released-values`); delete the claim to release the value early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained: Option<ClaimRetention>,
}

/// How long, and for which field, a deleted Service's value is retained.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRetention {
    /// When the value is released (RFC 3339).
    pub until: String,
    /// The field the value filled: `clusterIPs[N]`, `ports[PORT/PROTOCOL]` or
    /// `healthCheckNodePort`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl ClaimRetention {
    /// As the state keeps it (`None` when `until` is not a timestamp: no retention).
    pub fn stored(&self) -> Option<StoredRetention> {
        Some(StoredRetention {
            until: self.until.parse().ok()?,
            role: self.field.parse().ok(),
        })
    }
}

/// Kind of value a claim holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClaimKind {
    /// A ClusterIP (`spec.clusterIPs[i]`).
    ClusterIP,
    /// A NodePort or healthCheckNodePort.
    NodePort,
}

/// The Service a claim was taken for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedFor {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name; empty when the Service was created with `generateName`.
    #[serde(default)]
    pub name: String,
    /// `metadata.generateName` of the create, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    /// `metadata.uid` of the Service when the value was taken by an UPDATE of it; empty
    /// for a CREATE (reviewed before the API server assigns a uid). It ties the claim to
    /// that Service object exactly, so a claim can never be mistaken for one of an
    /// earlier or later Service of the same name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// The object name of the claim for `value`: a function of the value alone, so that
/// create-if-absent is the lock. IPv4 keeps its dotted form (`ip-10.96.0.10`); IPv6 is
/// written fully expanded with `-` between groups (`ip-fd00-0000-…-000a`), because
/// colons are not allowed in names and a compressed form could end in `-`; ports are
/// `nodeport-30080`.
pub fn claim_name(value: Claim) -> String {
    match value {
        Claim::Ip(IpAddr::V4(a)) => format!("ip-{a}"),
        Claim::Ip(IpAddr::V6(a)) => {
            let groups: Vec<String> = a.segments().iter().map(|g| format!("{g:04x}")).collect();
            format!("ip-{}", groups.join("-"))
        }
        Claim::NodePort(p) => format!("nodeport-{p}"),
    }
}

/// The merge patch that stores retention `p` as decided at `wall`, and when it ends:
/// `spec.retained` and the deleted Service's name (a claim of a `generateName` create
/// has none yet), with the claim's resourceVersion as precondition (of two replicas
/// storing one retention, the second gets a conflict and reads the first's).
pub fn retention_patch(
    p: &PendingRetention,
    wall: jiff::Timestamp,
) -> (jiff::Timestamp, serde_json::Value) {
    let until = jiff::SignedDuration::try_from(p.retain)
        .ok()
        .and_then(|d| wall.checked_add(d).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    let body = serde_json::json!({
        "metadata": {"resourceVersion": p.resource_version},
        "spec": {
            "service": {"name": p.service_name},
            "retained": {
                "until": until.to_string(),
                "field": p.role.map(|r| r.to_string()).unwrap_or_default(),
            },
        },
    });
    (until, body)
}

impl AllocationClaimSpec {
    /// The spec of a claim of `value` for the Service under review.
    pub fn new(value: Claim, owner: &ServiceRef) -> Self {
        let (kind, text) = match value {
            Claim::Ip(ip) => (ClaimKind::ClusterIP, ip.to_string()),
            Claim::NodePort(p) => (ClaimKind::NodePort, p.to_string()),
        };
        Self {
            kind,
            value: text,
            service: ClaimedFor {
                namespace: owner.namespace.clone(),
                name: owner.name.clone(),
                generate_name: owner.generate_name.clone(),
                uid: owner.uid.clone(),
            },
            request_uid: owner.request_uid.clone(),
            retained: None,
        }
    }

    /// The claimed value, or `None` if the spec does not parse (a hand-edited object).
    pub fn claimed(&self) -> Option<Claim> {
        match self.kind {
            ClaimKind::ClusterIP => self.value.parse::<IpAddr>().ok().map(Claim::Ip),
            ClaimKind::NodePort => self.value.parse::<i32>().ok().map(Claim::NodePort),
        }
    }

    /// The Service the claim stands for, as a state owner.
    pub fn owner(&self) -> ServiceRef {
        ServiceRef::of_request(
            &self.service.namespace,
            &self.service.name,
            &self.service.generate_name,
            &self.request_uid,
        )
        .with_uid(&self.service.uid)
    }
}

impl AllocationClaim {
    /// A claim object for `value`, named by [`claim_name`].
    pub fn for_value(value: Claim, owner: &ServiceRef) -> Self {
        AllocationClaim::new(&claim_name(value), AllocationClaimSpec::new(value, owner))
    }

    /// The state holder this object is, with its owner and value (`None` when the spec
    /// does not parse or the name is not the value's: such an object is no lock).
    pub fn holding(&self) -> Option<(HolderKey, ServiceRef, Claim)> {
        let name = self.metadata.name.clone()?;
        let value = self.spec.claimed()?;
        (claim_name(value) == name).then(|| (HolderKey::Claim { name }, self.spec.owner(), value))
    }

    /// The object as the allocation state records it (`None` without a name).
    pub fn object(&self) -> Option<ClaimObject> {
        let name = self.metadata.name.clone()?;
        Some(ClaimObject {
            value: self.holding().map(|(_, _, v)| v),
            uid: self.metadata.uid.clone().unwrap_or_default(),
            created: created_seconds(&self.metadata),
            owner: self.spec.owner(),
            resource_version: self.metadata.resource_version.clone().unwrap_or_default(),
            retained: self.spec.retained.as_ref().and_then(ClaimRetention::stored),
            name,
        })
    }
}

#[cfg(test)]
mod tests;
