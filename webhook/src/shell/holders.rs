//! Stored objects as holders of allocation state (pure).
//!
//! Each watched kind says which [`HolderKey`] an object is, which Service it stands for
//! and which values it holds; the watch loop only moves these into the state.

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::IPAddress;
use svcplane_allocator::range::parse_ip_sloppy;
use svcplane_allocator::service::claims_of;
use svcplane_allocator::{Claim, SvcView};

use crate::claim::AllocationClaim;
use crate::state::namespaces::NamespaceSettings;
use crate::state::{
    AllocationState, HolderKey, ServiceObject, ServiceRef, created_seconds, retention,
};

/// Which watched source a holder comes from (so a re-list replaces only its own kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// Services.
    Services,
    /// svcplane AllocationClaims.
    Claims,
    /// kube-apiserver IPAddress objects.
    IpAddresses,
    /// ServiceCIDR objects (the ranges; they hold no values).
    ServiceCidrs,
    /// Namespaces (they hold no values; their annotations and labels steer allocation).
    Namespaces,
}

impl SourceKind {
    /// Does `key` come from this source?
    pub fn owns(self, key: &HolderKey) -> bool {
        matches!(
            (self, key),
            (Self::Services, HolderKey::Service { .. })
                | (Self::Claims, HolderKey::Claim { .. })
                | (Self::IpAddresses, HolderKey::IpAddress { .. })
                | (Self::Namespaces, HolderKey::Namespace { .. })
        )
    }

    /// Stable label for logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::Claims => "allocationclaims",
            Self::IpAddresses => "ipaddresses",
            Self::ServiceCidrs => "servicecidrs",
            Self::Namespaces => "namespaces",
        }
    }
}

/// What one stored object contributes to the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHolding {
    /// The holder.
    pub key: HolderKey,
    /// The Service it stands for.
    pub owner: Option<ServiceRef>,
    /// The values it holds (may be empty).
    pub values: Vec<Claim>,
}

/// An object kind the webhook watches.
pub trait HolderSource {
    /// The watched source.
    const KIND: SourceKind;
    /// The holder key of this object (`None` when it has no name).
    fn key(&self) -> Option<HolderKey>;
    /// The full holding (what the object holds, and for whom).
    fn holding(&self) -> Option<ObjectHolding>;
    /// Record the stored object in the state; its key (`None` when it has no name).
    fn record(&self, state: &mut AllocationState) -> Option<HolderKey> {
        let h = self.holding()?;
        state.set(h.key.clone(), h.owner, h.values);
        Some(h.key)
    }
    /// Forget the object stored under `key` (deleted, or absent from a re-list).
    fn forget(state: &mut AllocationState, key: &HolderKey) {
        state.remove(key);
    }
    /// Keys of every object of this kind the state knows.
    fn known(state: &AllocationState) -> Vec<HolderKey> {
        state
            .holder_keys()
            .filter(|k| Self::KIND.owns(k))
            .cloned()
            .collect()
    }
}

/// The owner reference of a stored Service (its `generateName` included, so claims
/// taken for a name-less create match the Service the API server named).
fn service_owner(svc: &Service) -> ServiceRef {
    ServiceRef::of_request(
        svc.metadata.namespace.as_deref().unwrap_or(""),
        svc.metadata.name.as_deref().unwrap_or(""),
        svc.metadata.generate_name.as_deref().unwrap_or(""),
        "",
    )
}

impl HolderSource for Service {
    const KIND: SourceKind = SourceKind::Services;

    fn key(&self) -> Option<HolderKey> {
        Some(HolderKey::Service {
            namespace: self.metadata.namespace.clone().unwrap_or_default(),
            name: self.metadata.name.clone()?,
        })
    }

    fn holding(&self) -> Option<ObjectHolding> {
        let key = self.key()?;
        let view = SvcView::from_service(self);
        Some(ObjectHolding {
            key,
            owner: Some(service_owner(self)),
            values: claims_of(&view),
        })
    }

    fn record(&self, state: &mut AllocationState) -> Option<HolderKey> {
        let h = self.holding()?;
        let object = ServiceObject {
            uid: self.metadata.uid.clone().unwrap_or_default(),
            created: created_seconds(&self.metadata),
            // A malformed annotation was warned about at admission; it counts as unset.
            retain: retention::annotated(self.metadata.annotations.as_ref())
                .ok()
                .flatten(),
            roles: retention::roles_of(self),
        };
        state.set_service(h.key.clone(), service_owner(self), object, h.values);
        Some(h.key)
    }

    fn forget(state: &mut AllocationState, key: &HolderKey) {
        state.remove_service(key);
    }
}

impl HolderSource for AllocationClaim {
    const KIND: SourceKind = SourceKind::Claims;

    fn key(&self) -> Option<HolderKey> {
        Some(HolderKey::Claim {
            name: self.metadata.name.clone()?,
        })
    }

    /// A claim that is no valid lock (name and value disagree) holds nothing.
    fn holding(&self) -> Option<ObjectHolding> {
        let key = self.key()?;
        Some(match self.holding() {
            Some((_, owner, value)) => ObjectHolding {
                key,
                owner: Some(owner),
                values: vec![value],
            },
            None => ObjectHolding {
                key,
                owner: None,
                values: Vec::new(),
            },
        })
    }

    fn record(&self, state: &mut AllocationState) -> Option<HolderKey> {
        let object = self.object()?;
        let key = HolderKey::Claim {
            name: object.name.clone(),
        };
        state.set_claim(object);
        Some(key)
    }

    fn forget(state: &mut AllocationState, key: &HolderKey) {
        if let HolderKey::Claim { name } = key {
            state.remove_claim(name);
        }
    }

    /// Released claims hold nothing but are still known.
    fn known(state: &AllocationState) -> Vec<HolderKey> {
        state
            .claim_names()
            .map(|name| HolderKey::Claim { name: name.clone() })
            .collect()
    }
}

impl HolderSource for Namespace {
    const KIND: SourceKind = SourceKind::Namespaces;

    fn key(&self) -> Option<HolderKey> {
        Some(HolderKey::Namespace {
            name: self.metadata.name.clone()?,
        })
    }

    /// A namespace holds nothing.
    fn holding(&self) -> Option<ObjectHolding> {
        Some(ObjectHolding {
            key: self.key()?,
            owner: None,
            values: Vec::new(),
        })
    }

    fn record(&self, state: &mut AllocationState) -> Option<HolderKey> {
        let key = self.key()?;
        let settings = NamespaceSettings {
            // A malformed annotation counts as unset (the Services' reviews say why
            // their own would be refused; a namespace's is only logged).
            retain: retention::annotated(self.metadata.annotations.as_ref())
                .inspect_err(
                    |e| tracing::debug!(namespace = ?self.metadata.name, error = %e, "ignored"),
                )
                .ok()
                .flatten(),
            labels: self.metadata.labels.clone().unwrap_or_default(),
        };
        if let HolderKey::Namespace { name } = &key {
            state.set_namespace(name, settings);
        }
        Some(key)
    }

    fn forget(state: &mut AllocationState, key: &HolderKey) {
        if let HolderKey::Namespace { name } = key {
            state.remove_namespace(name);
        }
    }

    fn known(state: &AllocationState) -> Vec<HolderKey> {
        state
            .namespace_names()
            .map(|name| HolderKey::Namespace { name: name.clone() })
            .collect()
    }
}

impl HolderSource for IPAddress {
    const KIND: SourceKind = SourceKind::IpAddresses;

    fn key(&self) -> Option<HolderKey> {
        Some(HolderKey::IpAddress {
            name: self.metadata.name.clone()?,
        })
    }

    /// The address is the object name; the owner is the parent Service when the
    /// parentRef points at a core Service, else unknown (always someone else's).
    fn holding(&self) -> Option<ObjectHolding> {
        let key = self.key()?;
        let ip = self.metadata.name.as_deref().and_then(parse_ip_sloppy);
        let owner = Some(&self.spec.parent_ref).and_then(|p| {
            let core_service =
                p.group.as_deref().unwrap_or("").is_empty() && p.resource == "services";
            core_service.then(|| ServiceRef::named(p.namespace.as_deref().unwrap_or(""), &p.name))
        });
        Some(ObjectHolding {
            key,
            owner,
            values: ip.map(Claim::Ip).into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::networking::v1::{IPAddressSpec, ParentReference};

    use super::*;

    fn ip(s: &str) -> Claim {
        Claim::Ip(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn a_service_holds_its_cluster_ips_and_node_ports() {
        let mut svc = Service::default();
        svc.metadata.namespace = Some("ns".into());
        svc.metadata.name = Some("web".into());
        svc.spec = Some(ServiceSpec {
            type_: Some("NodePort".into()),
            cluster_ip: Some("10.0.0.5".into()),
            cluster_ips: Some(vec!["10.0.0.5".into(), "fd00::5".into()]),
            ports: Some(vec![ServicePort {
                port: 80,
                node_port: Some(30080),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let h = HolderSource::holding(&svc).unwrap();
        assert_eq!(
            h.key,
            HolderKey::Service {
                namespace: "ns".into(),
                name: "web".into()
            }
        );
        assert_eq!(h.owner, Some(ServiceRef::named("ns", "web")));
        assert_eq!(
            h.values,
            vec![ip("10.0.0.5"), ip("fd00::5"), Claim::NodePort(30080)]
        );
    }

    #[test]
    fn an_ip_address_is_owned_by_its_parent_service_only() {
        let mut a = IPAddress::default();
        a.metadata.name = Some("10.0.0.7".into());
        a.spec = IPAddressSpec {
            parent_ref: ParentReference {
                group: Some(String::new()),
                resource: "services".into(),
                namespace: Some("ns".into()),
                name: "web".into(),
            },
        };
        let h = HolderSource::holding(&a).unwrap();
        assert_eq!(h.owner, Some(ServiceRef::named("ns", "web")));
        assert_eq!(h.values, vec![ip("10.0.0.7")]);
        a.spec.parent_ref.resource = "gateways".into();
        assert_eq!(HolderSource::holding(&a).unwrap().owner, None);
    }

    #[test]
    fn an_invalid_claim_holds_nothing() {
        let mut c =
            AllocationClaim::for_value(Claim::NodePort(30001), &ServiceRef::named("a", "b"));
        c.metadata.name = Some("nodeport-30009".into());
        let h = HolderSource::holding(&c).unwrap();
        assert!(h.values.is_empty());
    }

    #[test]
    fn sources_own_only_their_keys() {
        let k = HolderKey::Claim { name: "x".into() };
        assert!(SourceKind::Claims.owns(&k));
        assert!(!SourceKind::Services.owns(&k));
        assert!(!SourceKind::IpAddresses.owns(&HolderKey::Pending {
            request_uid: "u".into()
        }));
    }
}
