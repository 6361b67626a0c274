//! The controllers `svcplane run` can run, as one table.
//!
//! kube-controller-manager keeps its controllers in a table of descriptors (name,
//! aliases, constructor); svcplane does the same, and derives everything else from it:
//! the names `--controllers` accepts, which resources are watched (the union of what the
//! enabled controllers read), when the workers start (once each of those caches has
//! listed), and which API client each controller writes with. Adding a controller is a
//! core module, one shell file implementing [`Controller`], one entry here and its
//! flags.

use std::sync::Arc;

use super::access::{self, Access, Grant};
use super::cache::Resource;
use super::controllers::allocator_repair::AllocatorRepair;
use super::controllers::endpoints::EndpointsController;
use super::controllers::endpointslice::EndpointSliceController;
use super::controllers::mirroring::MirroringController;
use super::controllers::servicecidr::ServiceCidrController;
use super::controllers::{Build, Controller, Syncer};
use super::queue::RateLimit;

/// One controller `svcplane run` can run.
#[derive(Debug)]
pub(crate) struct Descriptor {
    /// The name `--controllers` uses.
    pub(crate) name: &'static str,
    /// Other names accepted for it (kube-controller-manager's).
    pub(crate) aliases: &'static [&'static str],
    /// The resources it reads: watched while it runs, and listed before it starts.
    pub(crate) reads: &'static [Resource],
    /// Whether `*` (and the default `--controllers`) includes it.
    pub(crate) default_on: bool,
    /// Its API client user (its own request budget, as in kube-controller-manager).
    pub(crate) client_user: &'static str,
    /// The access it needs beyond list/watch of `reads`: its writes, and what admission
    /// plugins check on its behalf (see [`super::access`]).
    pub(crate) grants: &'static [Access],
    /// Builds it.
    pub(crate) build: fn(&Build<'_>) -> Arc<dyn Controller>,
}

impl Descriptor {
    /// Whether `name` names this controller.
    pub(crate) fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// Every controller, in start order.
pub(crate) const CONTROLLERS: &[Descriptor] = &[
    Descriptor {
        name: "endpointslice",
        aliases: &["endpointslice-controller"],
        reads: &[
            Resource::Services,
            Resource::Pods,
            Resource::Nodes,
            Resource::EndpointSlices,
        ],
        default_on: true,
        client_user: "endpointslice-controller",
        grants: &[
            access::SLICE_WRITES,
            Access {
                group: "",
                resource: "services/finalizers",
                verbs: &["update"],
                why: "slices name their Service as owner with blockOwnerDeletion, which \
                      OwnerReferencesPermissionEnforcement allows only to who may update \
                      the owner's finalizers",
            },
            access::EVENTS,
        ],
        build: |b| {
            Arc::new(EndpointSliceController::new(
                b.parts(RateLimit::ENDPOINT_SLICE, EndpointSliceController::QUEUE),
                b.options.endpoint_slice,
            ))
        },
    },
    Descriptor {
        name: "endpoints",
        aliases: &["endpoint", "endpoints-controller"],
        reads: &[Resource::Services, Resource::Pods, Resource::Endpoints],
        default_on: true,
        client_user: "endpoint-controller",
        grants: &[
            Access {
                group: "",
                resource: "endpoints",
                verbs: &["create", "update", "delete"],
                why: "Endpoints objects written by the Endpoints controller",
            },
            Access {
                group: "",
                resource: "endpoints/restricted",
                verbs: &["create"],
                why: "OpenShift's RestrictedEndpointsAdmission checks it for Endpoints \
                      addresses in the cluster's networks (kube-controller-manager's role \
                      holds it too)",
            },
            access::EVENTS,
        ],
        build: |b| {
            Arc::new(EndpointsController::new(
                b.parts(RateLimit::ENDPOINTS, EndpointsController::QUEUE),
                b.options.endpoints,
            ))
        },
    },
    Descriptor {
        name: "endpointslicemirroring",
        aliases: &["endpointslice-mirroring-controller"],
        reads: &[
            Resource::Services,
            Resource::EndpointSlices,
            Resource::Endpoints,
        ],
        default_on: true,
        client_user: "endpointslice-mirroring-controller",
        grants: &[
            access::SLICE_WRITES,
            Access {
                group: "",
                resource: "endpoints/finalizers",
                verbs: &["update"],
                why: "mirrored slices name their Endpoints as owner with blockOwnerDeletion \
                      (OwnerReferencesPermissionEnforcement)",
            },
            access::EVENTS,
        ],
        build: |b| {
            Arc::new(MirroringController::new(
                b.parts(RateLimit::MIRRORING, MirroringController::QUEUE),
                b.options.mirroring,
            ))
        },
    },
    Descriptor {
        name: "allocator-repair",
        aliases: &[],
        reads: &[Resource::Services, Resource::ServiceCidrs],
        default_on: true,
        client_user: "allocator-repair",
        grants: &[access::EVENTS],
        build: |b| {
            Arc::new(AllocatorRepair::new(
                b.cache.clone(),
                b.events.clone(),
                b.options.allocator_repair.clone(),
            ))
        },
    },
    // Off by default: kube-controller-manager runs it on most clusters (disable it
    // there with `--controllers=*,-service-cidr-controller` before enabling it here).
    Descriptor {
        name: "servicecidr",
        aliases: &["service-cidr-controller"],
        reads: &[Resource::ServiceCidrs, Resource::IpAddresses],
        default_on: false,
        client_user: "service-cidr-controller",
        grants: &[
            Access {
                group: "networking.k8s.io",
                resource: "servicecidrs",
                verbs: &["patch"],
                why: "the ServiceCIDR controller's finalizer (a patch of the object)",
            },
            Access {
                group: "networking.k8s.io",
                resource: "servicecidrs/status",
                verbs: &["patch"],
                why: "the ServiceCIDR controller's Ready condition (server-side apply)",
            },
            access::EVENTS,
        ],
        build: |b| {
            Arc::new(ServiceCidrController::new(
                // client-go's default controller limiter, as upstream's queue uses.
                b.parts(RateLimit::ENDPOINTS, ServiceCidrController::QUEUE),
                b.options.service_cidr,
            ))
        },
    },
];

/// Whether `*` includes the controller `name`.
pub(crate) fn default_on(name: &str) -> bool {
    CONTROLLERS.iter().any(|d| d.name == name && d.default_on)
}

/// The canonical name of the controller `name` or an alias names.
pub(crate) fn canonical(name: &str) -> Option<&'static str> {
    CONTROLLERS
        .iter()
        .find(|d| d.is_named(name))
        .map(|d| d.name)
}

/// The other names `--controllers` accepts (kube-controller-manager's), in table order.
pub(crate) fn aliases() -> impl Iterator<Item = &'static str> {
    CONTROLLERS.iter().flat_map(|d| d.aliases.iter().copied())
}

/// The other names of the controller `name` (empty for a name the table lacks).
pub(crate) fn aliases_of(name: &str) -> &'static [&'static str] {
    CONTROLLERS
        .iter()
        .find(|d| d.name == name)
        .map_or(&[], |d| d.aliases)
}

/// Everything the controller `name` needs from RBAC: list/watch of what it reads and
/// its [`Descriptor::grants`], cluster-wide (empty for a name the table lacks).
pub(crate) fn grants_of(name: &str) -> Vec<Grant> {
    let Some(d) = CONTROLLERS.iter().find(|d| d.name == name) else {
        return Vec::new();
    };
    let reads = d.reads.iter().map(|r| Access {
        group: r.group(),
        resource: r.plural(),
        verbs: &["list", "watch"],
        why: "watched into the controllers' caches",
    });
    reads
        .chain(d.grants.iter().copied())
        .map(Grant::cluster)
        .collect()
}

/// The canonical names, in table order.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    CONTROLLERS.iter().map(|d| d.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_are_unique() {
        let mut all: Vec<&str> = CONTROLLERS
            .iter()
            .flat_map(|d| std::iter::once(d.name).chain(d.aliases.iter().copied()))
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn kube_controller_managers_names_resolve() {
        assert_eq!(canonical("endpoint"), Some("endpoints"));
        assert_eq!(canonical("endpoints-controller"), Some("endpoints"));
        assert_eq!(canonical("endpointslice-controller"), Some("endpointslice"));
        assert_eq!(
            canonical("endpointslice-mirroring-controller"),
            Some("endpointslicemirroring")
        );
        assert_eq!(canonical("nope"), None);
    }

    #[test]
    fn every_pod_reader_reads_services() {
        // The dispatcher maps Pod changes through the Service store.
        for d in CONTROLLERS
            .iter()
            .filter(|d| d.reads.contains(&Resource::Pods))
        {
            assert!(d.reads.contains(&Resource::Services), "{}", d.name);
        }
    }

    #[test]
    fn the_service_cidr_controller_is_off_by_default() {
        assert!(!default_on("servicecidr"));
        assert_eq!(canonical("service-cidr-controller"), Some("servicecidr"));
        assert!(default_on("endpointslice"));
    }
}
