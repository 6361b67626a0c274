//! The controllers `svcplane run` can run, as one table.
//!
//! kube-controller-manager keeps its controllers in a table of descriptors (name,
//! aliases, constructor); svcplane does the same, and derives everything else from it:
//! the names `--controllers` accepts, which resources are watched (the union of what the
//! enabled controllers read), when the workers start (once each of those caches has
//! listed), which API client each controller writes with, and `run`'s flags with the
//! settings made of them (each controller's flag group). Adding a controller is a core
//! module, one shell file implementing [`Controller`] and [`Registered`] (with its flag
//! group), and one entry here.

use std::sync::Arc;

use super::access::{self, Access, Grant};
use super::cache::Resource;
use super::controllers::allocator_repair::AllocatorRepair;
use super::controllers::endpoints::EndpointsController;
use super::controllers::endpointslice::EndpointSliceController;
use super::controllers::mirroring::MirroringController;
use super::controllers::servicecidr::ServiceCidrController;
use super::controllers::{Build, Controller, Registered};
use super::flag_group::{FlagGroup, Settings, Shared};

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
    /// Its flag group, its settings and its constructor ([`Make::of`]).
    pub(crate) make: Make,
}

/// What the registry knows of a controller's type: the flags it adds to `run`, the
/// settings it makes of them and how it is built from those settings. Made by
/// [`Make::of`] from one type, so the settings a controller is built from are the
/// ones its own flag group made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Make {
    /// Adds its flag group to `run`'s command line.
    pub(crate) flags: fn(clap::Command) -> clap::Command,
    /// Adds its settings, made from `run`'s command line, to [`Settings`].
    pub(crate) settings: fn(&mut Settings, &clap::ArgMatches, &Shared) -> Result<(), clap::Error>,
    /// Builds it from its settings; `None` when they are missing from the options.
    pub(crate) build: fn(&Build<'_>) -> Option<Arc<dyn Controller>>,
    /// Whether `settings` hold what `build` needs.
    pub(crate) has_settings: fn(&Settings) -> bool,
}

impl Make {
    pub(crate) const fn of<C: Registered>() -> Make {
        Make {
            flags: <C::Flags as clap::Args>::augment_args,
            settings: Settings::insert::<C::Flags>,
            build: build::<C>,
            has_settings: |s| s.get::<<C::Flags as FlagGroup>::Config>().is_some(),
        }
    }
}

fn build<C: Registered>(b: &Build<'_>) -> Option<Arc<dyn Controller>> {
    let config = b
        .options
        .settings
        .get::<<C::Flags as FlagGroup>::Config>()?
        .clone();
    Some(Arc::new(C::build(b, config)))
}

/// Every registered controller's settings from `run`'s command line `all`.
pub(crate) fn settings(all: &clap::ArgMatches, shared: &Shared) -> Result<Settings, clap::Error> {
    let mut settings = Settings::default();
    for d in CONTROLLERS {
        (d.make.settings)(&mut settings, all, shared)?;
        // Two controllers sharing a settings type would overwrite each other's.
        if !(d.make.has_settings)(&settings) {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("the {} controller's flag group made no settings", d.name),
            ));
        }
    }
    Ok(settings)
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
        make: Make::of::<EndpointSliceController>(),
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
        make: Make::of::<EndpointsController>(),
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
        make: Make::of::<MirroringController>(),
    },
    Descriptor {
        name: "allocator-repair",
        aliases: &[],
        reads: &[Resource::Services, Resource::ServiceCidrs],
        default_on: true,
        client_user: "allocator-repair",
        grants: &[access::EVENTS],
        make: Make::of::<AllocatorRepair>(),
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
        make: Make::of::<ServiceCidrController>(),
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

    /// Each controller's flags reach `run`'s command line, and the settings its group
    /// makes of them are the ones it is built from.
    #[test]
    fn every_controller_is_built_from_its_own_flags() {
        use clap::Parser;
        let cli = crate::cli::Cli::parse_from([
            "svcplane",
            "run",
            "--webhook=false",
            "--max-endpoints-per-slice=7",
            "--endpoint-updates-batch-period=2s",
            "--mirroring-max-endpoints-per-subset=9",
            "--allocator-repair-interval=1m",
        ]);
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let shared = Shared {
            allocator: svcplane_allocator::AllocatorConfig::from_flags(
                "10.96.0.0/12",
                "30000-32767",
            )
            .unwrap(),
            follow_service_cidrs: true,
            seed: 3,
        };
        let s = settings(&args.controller_flags.0, &shared).unwrap();
        for d in CONTROLLERS {
            assert!((d.make.has_settings)(&s), "{} has no settings", d.name);
        }
        use crate::shell::options::*;
        let slices = s.get::<EndpointSliceConfig>().unwrap();
        assert_eq!(slices.max_endpoints_per_slice, 7);
        // Another group's flag is the default of its own batch period.
        assert_eq!(slices.batch_period, std::time::Duration::from_secs(2));
        assert_eq!(
            s.get::<MirroringConfig>().unwrap().max_endpoints_per_subset,
            9
        );
        let repair = s.get::<AllocatorRepairConfig>().unwrap();
        assert_eq!((repair.interval.as_secs(), repair.seed), (60, 3));
        assert_eq!(s.get::<ServiceCidrConfig>().unwrap().workers, 5);
    }

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
