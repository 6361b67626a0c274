//! The API access svcplane needs, as one table: every verb on every resource and
//! subresource the process calls, plus the permissions admission plugins check on its
//! behalf.
//!
//! RBAC written by hand drifts from the code: the chart once let svcplane write no
//! EndpointSlice on API servers running `OwnerReferencesPermissionEnforcement`,
//! because nothing listed the `services/finalizers` check that plugin makes for an
//! owner reference with `blockOwnerDeletion`. Each controller declares its own access
//! in the registry ([`super::registry::Descriptor::grants`], plus list/watch of what
//! it reads); the process-level needs (webhook, certificates, leader election, the
//! secure metrics port) are here. `svcplane rbac` prints the result for a set of
//! `run` flags, and the chart's rendered rules are checked against that output in
//! both directions (`tests/chart/test_chart.py`).

use std::collections::{BTreeMap, BTreeSet};

/// One permission: `verbs` on `resource` (a plural, or `plural/subresource`) of the
/// API group `group` (`""` for the core group), and why svcplane needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub why: &'static str,
}

/// An [`Access`] granted in one place: cluster-wide (`namespace: None`, a
/// ClusterRole rule) or in one namespace (a Role rule), for any object or only the
/// objects `names`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub access: Access,
    pub namespace: Option<String>,
    pub names: Vec<String>,
}

impl Grant {
    /// `access` on every object, cluster-wide.
    pub fn cluster(access: Access) -> Self {
        Self {
            access,
            namespace: None,
            names: Vec::new(),
        }
    }
}

/// One RBAC rule of the result: grants that differ only in verbs and reasons merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub namespace: Option<String>,
    pub group: &'static str,
    pub resource: &'static str,
    pub names: Vec<String>,
    pub verbs: BTreeSet<&'static str>,
    pub why: Vec<&'static str>,
}

/// Merges grants into rules, one per (namespace, group, resource, names), in a
/// stable order: cluster-wide first, then by namespace, group and resource.
pub fn merge(grants: impl IntoIterator<Item = Grant>) -> Vec<Rule> {
    type Key = (Option<String>, &'static str, &'static str, Vec<String>);
    let mut rules: BTreeMap<Key, Rule> = BTreeMap::new();
    for g in grants {
        let key = (
            g.namespace.clone(),
            g.access.group,
            g.access.resource,
            g.names.clone(),
        );
        let rule = rules.entry(key).or_insert_with(|| Rule {
            namespace: g.namespace,
            group: g.access.group,
            resource: g.access.resource,
            names: g.names,
            verbs: BTreeSet::new(),
            why: Vec::new(),
        });
        rule.verbs.extend(g.access.verbs.iter().copied());
        if !rule.why.contains(&g.access.why) {
            rule.why.push(g.access.why);
        }
    }
    rules.into_values().collect()
}

/// The `events.k8s.io` events every controller records (a repeated event's series is
/// patched).
pub const EVENTS: Access = Access {
    group: "events.k8s.io",
    resource: "events",
    verbs: &["create", "patch"],
    why: "events about the objects the controllers handle",
};

/// The EndpointSlice writes of the EndpointSlice and mirroring controllers.
pub const SLICE_WRITES: Access = Access {
    group: "discovery.k8s.io",
    resource: "endpointslices",
    verbs: &["create", "update", "delete"],
    why: "EndpointSlices written by the controllers",
};

/// Self-managed webhook certificates (`--tls-secret-name`): the Secret they live in,
/// and the webhook configurations whose `caBundle` is kept current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfManagedCerts {
    pub namespace: String,
    pub secret: String,
    /// `--webhook-configuration-name`; `None`: no caBundle is published.
    pub configuration: Option<String>,
}

/// What the process does beyond its controllers, from its configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessNeeds {
    /// The admission webhook runs (every replica) with its claims repair (the leader).
    pub webhook: bool,
    pub self_managed_certs: Option<SelfManagedCerts>,
    /// `--secure-metrics-bind-address`: scrapers' tokens are checked with the API server.
    pub secure_metrics: bool,
    /// Leader election on the Lease `(namespace, name)`.
    pub lease: Option<(String, String)>,
}

const READ: &[&str] = &["list", "watch"];

/// The grants of everything but the controllers.
pub fn process_grants(needs: &ProcessNeeds) -> Vec<Grant> {
    let mut out = Vec::new();
    if needs.webhook {
        for (group, resource) in [
            ("", "services"),
            ("networking.k8s.io", "servicecidrs"),
            ("networking.k8s.io", "ipaddresses"),
        ] {
            out.push(Grant::cluster(Access {
                group,
                resource,
                verbs: READ,
                why: "the webhook's allocation state (what is taken, and the Service ranges)",
            }));
        }
        out.push(Grant::cluster(Access {
            group: "",
            resource: "namespaces",
            verbs: &["get", "list", "watch"],
            why: "the webhook's allocation state (a namespace's retention annotation and labels, which ServiceCIDR selectors read; a get when a Service arrives before its namespace's watch event)",
        }));
        out.push(Grant::cluster(Access {
            group: "events.k8s.io",
            resource: "events",
            verbs: &["create"],
            why: "the webhook's RetainedValuesGivenBack events",
        }));
        out.push(Grant::cluster(Access {
            group: "svcplane.io",
            resource: "allocationclaims",
            verbs: &["get", "list", "watch", "create", "patch", "delete"],
            why: "the webhook's claims (a lost race reads the winner's; the leader releases unused ones and stores retentions)",
        }));
    }
    if let Some(certs) = &needs.self_managed_certs {
        let named = |access: Access, names: Vec<String>| Grant {
            access,
            namespace: Some(certs.namespace.clone()),
            names,
        };
        out.push(named(
            Access {
                group: "",
                resource: "secrets",
                verbs: &["create"],
                why: "the self-managed certificate Secret (create cannot be limited by name)",
            },
            Vec::new(),
        ));
        out.push(named(
            Access {
                group: "",
                resource: "secrets",
                verbs: &["get", "update"],
                why: "the self-managed certificate Secret, read and rotated",
            },
            vec![certs.secret.clone()],
        ));
        if let Some(config) = certs.configuration.as_ref().filter(|c| !c.is_empty()) {
            for resource in [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ] {
                out.push(Grant {
                    access: Access {
                        group: "admissionregistration.k8s.io",
                        resource,
                        verbs: &["get", "patch"],
                        why: "the caBundle of svcplane's own webhook configurations",
                    },
                    namespace: None,
                    names: vec![config.clone()],
                });
            }
        }
    }
    if needs.secure_metrics {
        out.push(Grant::cluster(Access {
            group: "authentication.k8s.io",
            resource: "tokenreviews",
            verbs: &["create"],
            why: "the secure metrics port authenticates each scraper's token",
        }));
        out.push(Grant::cluster(Access {
            group: "authorization.k8s.io",
            resource: "subjectaccessreviews",
            verbs: &["create"],
            why: "the secure metrics port asks whether the scraper may get /metrics",
        }));
    }
    if let Some((namespace, name)) = &needs.lease {
        let lease = |verbs, why, names| Grant {
            access: Access {
                group: "coordination.k8s.io",
                resource: "leases",
                verbs,
                why,
            },
            namespace: Some(namespace.clone()),
            names,
        };
        out.push(lease(
            &["create"],
            "leader election (create cannot be limited by name)",
            Vec::new(),
        ));
        out.push(lease(
            &["get", "update"],
            "leader election: read, renew and release the Lease",
            vec![name.clone()],
        ));
        out.push(Grant {
            access: Access {
                group: "",
                resource: "pods",
                verbs: &["get"],
                why: "leader election: a Lease whose holder Pod no longer exists is taken over at once",
            },
            namespace: Some(namespace.clone()),
            names: Vec::new(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbs(rules: &[Rule], group: &str, resource: &str) -> Vec<&'static str> {
        rules
            .iter()
            .filter(|r| r.group == group && r.resource == resource)
            .flat_map(|r| r.verbs.iter().copied())
            .collect()
    }

    #[test]
    fn merging_unions_verbs_and_keeps_each_reason_once() {
        let a = Access {
            group: "",
            resource: "services",
            verbs: &["list", "watch"],
            why: "a",
        };
        let b = Access {
            verbs: &["watch", "get"],
            why: "b",
            ..a
        };
        let rules = merge([Grant::cluster(a), Grant::cluster(b), Grant::cluster(a)]);
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].verbs.iter().copied().collect::<Vec<_>>(),
            ["get", "list", "watch"]
        );
        assert_eq!(rules[0].why, ["a", "b"]);
    }

    #[test]
    fn named_and_namespaced_grants_stay_apart_from_cluster_wide_ones() {
        let needs = ProcessNeeds {
            lease: Some(("kube-system".into(), "svcplane".into())),
            ..ProcessNeeds::default()
        };
        let rules = merge(process_grants(&needs));
        // create leases; get/update the Lease by name; get pods (a gone holder).
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert_eq!(verbs(&rules, "", "pods"), ["get"]);
        assert!(
            rules
                .iter()
                .all(|r| r.namespace.as_deref() == Some("kube-system"))
        );
        let named: Vec<_> = rules.iter().filter(|r| !r.names.is_empty()).collect();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].names, ["svcplane"]);
        assert_eq!(
            named[0].verbs.iter().copied().collect::<Vec<_>>(),
            ["get", "update"]
        );
    }

    #[test]
    fn the_lease_is_never_patched() {
        // The elector reads, creates and replaces its Lease; a patch grant would be wider
        // than the code.
        let needs = ProcessNeeds {
            lease: Some(("ns".into(), "l".into())),
            ..ProcessNeeds::default()
        };
        let rules = merge(process_grants(&needs));
        assert!(!verbs(&rules, "coordination.k8s.io", "leases").contains(&"patch"));
    }

    #[test]
    fn certificates_need_the_secret_and_only_the_named_configurations() {
        let certs = SelfManagedCerts {
            namespace: "kube-system".into(),
            secret: "svcplane-webhook-certs".into(),
            configuration: Some("svcplane".into()),
        };
        let needs = ProcessNeeds {
            webhook: true,
            self_managed_certs: Some(certs.clone()),
            ..ProcessNeeds::default()
        };
        let rules = merge(process_grants(&needs));
        let configurations: Vec<_> = rules
            .iter()
            .filter(|r| r.resource.ends_with("webhookconfigurations"))
            .collect();
        assert_eq!(configurations.len(), 2, "{rules:?}");
        for r in configurations {
            assert_eq!(r.names, ["svcplane"]);
            assert_eq!(r.namespace, None);
        }
        let without = ProcessNeeds {
            self_managed_certs: Some(SelfManagedCerts {
                configuration: None,
                ..certs
            }),
            ..needs
        };
        let rules = merge(process_grants(&without));
        assert!(
            !rules
                .iter()
                .any(|r| r.resource.ends_with("webhookconfigurations"))
        );
        assert_eq!(verbs(&rules, "", "secrets"), ["create", "get", "update"]);
    }

    #[test]
    fn the_claims_grant_names_the_claims_crd() {
        use kube::Resource as _;
        use svcplane_webhook::claim::AllocationClaim;
        let needs = ProcessNeeds {
            webhook: true,
            ..ProcessNeeds::default()
        };
        let rules = merge(process_grants(&needs));
        let group = AllocationClaim::group(&());
        let plural = AllocationClaim::plural(&());
        assert!(
            rules
                .iter()
                .any(|r| r.group == group && r.resource == plural && r.verbs.contains("create")),
            "{rules:?}"
        );
    }

    #[test]
    fn nothing_is_needed_for_what_does_not_run() {
        assert!(process_grants(&ProcessNeeds::default()).is_empty());
    }
}
