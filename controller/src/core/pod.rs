//! Pod predicates and Service-port resolution shared by the endpoint
//! reconcilers (ES-1.2, ES-1.3).
//!
//! The reconcilers read Pods only through [`PodView`], so the runtime can
//! cache a compact copy ([`CachedPod`](crate::shell::cache::CachedPod))
//! instead of whole API objects, while `plan`, the tests and the benches keep
//! passing `Pod`s. Every predicate here is written once, over the trait, so
//! the two representations differ only in how they answer the raw reads
//! (checked by `controller/tests/cached_pod_equivalence.rs`).

use crate::core::event::PlannedEvent;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodCondition, Service, ServicePort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

/// The protocol a container port or Service port has when none is set.
pub const DEFAULT_PROTOCOL: &str = "TCP";

/// The reads the endpoint reconcilers make of a Pod, and nothing more.
///
/// Strings are borrowed from the implementor, so desired endpoints can keep
/// pointing into the cached object instead of copying.
pub trait PodView {
    /// `metadata.namespace`, `""` when unset.
    fn namespace(&self) -> &str;
    /// `metadata.name`, `""` when unset.
    fn name(&self) -> &str;
    /// `metadata.uid`.
    fn uid(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// Every label, sorted by key (byte order, as a `BTreeMap` iterates).
    fn labels(&self) -> impl Iterator<Item = (&str, &str)>;
    /// `metadata.deletionTimestamp`.
    fn deletion_timestamp(&self) -> Option<Timestamp>;
    /// `spec.nodeName`.
    fn node_name(&self) -> Option<&str>;
    /// `spec.hostname`.
    fn hostname(&self) -> Option<&str>;
    /// `spec.subdomain`.
    fn subdomain(&self) -> Option<&str>;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// The first `Ready` condition's status is exactly `True`.
    fn is_ready(&self) -> bool;
    /// `lastTransitionTime` of the first `Ready` condition.
    fn ready_transition_time(&self) -> Option<Timestamp>;
    /// `status.podIP`.
    fn pod_ip(&self) -> Option<&str>;
    /// `status.podIPs[*].ip`, in order.
    fn pod_ips(&self) -> impl Iterator<Item = &str>;
    /// ES-1.3 named-port lookup: regular containers first, then
    /// initContainers with restartPolicy Always; name AND protocol (absent =
    /// TCP) must match. The first match wins.
    fn find_named_port(&self, name: &str, protocol: &str) -> Option<i32>;
}

/// The first `Ready` condition, which is the one upstream's
/// `GetPodReadyCondition` reads.
#[inline]
fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether an init container is a sidecar (restartPolicy `Always`), whose
/// ports count for named-port lookup (ES-1.3).
#[inline]
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

// Every read is `#[inline]`: the generic reconcilers are instantiated in
// each crate that calls them (the benches, `svcplane-tests`), and without
// LTO a non-generic function of this crate can only be inlined there if it
// is marked. For the same reason the reads avoid iterator adapters that
// would not be inlined either (see `pod_ips`, `find_named_port`).
impl PodView for Pod {
    #[inline]
    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    #[inline]
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    #[inline]
    fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }

    #[inline]
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    #[inline]
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    #[inline]
    fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    #[inline]
    fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.metadata.deletion_timestamp.as_ref().map(|t| t.0)
    }

    #[inline]
    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    #[inline]
    fn hostname(&self) -> Option<&str> {
        self.spec.as_ref()?.hostname.as_deref()
    }

    #[inline]
    fn subdomain(&self) -> Option<&str> {
        self.spec.as_ref()?.subdomain.as_deref()
    }

    #[inline]
    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    #[inline]
    fn is_ready(&self) -> bool {
        ready_condition(self).is_some_and(|c| c.status == "True")
    }

    #[inline]
    fn ready_transition_time(&self) -> Option<Timestamp> {
        ready_condition(self)?
            .last_transition_time
            .as_ref()
            .map(|t| t.0)
    }

    #[inline]
    fn pod_ip(&self) -> Option<&str> {
        self.status.as_ref()?.pod_ip.as_deref()
    }

    #[inline]
    fn pod_ips(&self) -> impl Iterator<Item = &str> {
        // A slice iterator, not `Option::into_iter().flatten()`: the
        // flattening adapter was not inlined into callers in other crates.
        self.status
            .as_ref()
            .and_then(|s| s.pod_ips.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|ip| ip.ip.as_str())
    }

    #[inline]
    fn find_named_port(&self, name: &str, protocol: &str) -> Option<i32> {
        // Plain loops rather than a chain of iterator adapters, which were
        // not inlined into other crates' instantiations and made the lookup
        // cost about twice the instructions.
        let spec = self.spec.as_ref()?;
        let matches = |p: &ContainerPort| {
            p.name.as_deref() == Some(name)
                && p.protocol.as_deref().unwrap_or(DEFAULT_PROTOCOL) == protocol
        };
        for c in &spec.containers {
            for p in c.ports.iter().flatten() {
                if matches(p) {
                    return Some(p.container_port);
                }
            }
        }
        for c in spec.init_containers.iter().flatten() {
            if !is_sidecar(c) {
                continue;
            }
            for p in c.ports.iter().flatten() {
                if matches(p) {
                    return Some(p.container_port);
                }
            }
        }
        None
    }
}

/// The `Ready` condition is exactly `True`; phase and containers are not read.
pub fn is_ready<P: PodView>(pod: &P) -> bool {
    pod.is_ready()
}

/// `status.phase` is `Succeeded` or `Failed`.
pub fn is_terminal<P: PodView>(pod: &P) -> bool {
    matches!(pod.phase(), Some("Succeeded" | "Failed"))
}

/// `status.podIP` or `status.podIPs` is non-empty.
pub fn has_ip<P: PodView>(pod: &P) -> bool {
    pod.pod_ip().is_some_and(|ip| !ip.is_empty()) || pod.pod_ips().next().is_some()
}

/// `metadata.deletionTimestamp` is set.
pub fn is_terminating<P: PodView>(pod: &P) -> bool {
    pod.deletion_timestamp().is_some()
}

/// Whether a Pod update takes something away from the endpoints built from it: the
/// Pod stops being ready, starts terminating, turns terminal, loses or changes an IP
/// it had,
/// or changes labels (it may leave a selector). Such changes are synced at once; the
/// others (a Pod added, turning ready, status details) may wait briefly to be written
/// together with the changes that follow them (see `shell::queue`, write coalescing),
/// because a missing new endpoint costs capacity while a stale old one costs failed
/// connections.
pub fn update_withdraws<P: PodView>(old: &P, new: &P) -> bool {
    (is_ready(old) && !is_ready(new))
        || (!is_terminating(old) && is_terminating(new))
        || (!is_terminal(old) && is_terminal(new))
        || (has_ip(old) && (!old.pod_ips().eq(new.pod_ips()) || old.pod_ip() != new.pod_ip()))
        || !old.labels().eq(new.labels())
}

/// Why a Pod cannot be an endpoint at all (ES-1.2), in the order
/// the rules are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ineligible {
    /// `status.phase` is `Succeeded` or `Failed`.
    Terminal,
    /// Neither `status.podIP` nor `status.podIPs` is set.
    NoIp,
    /// Being deleted, and the caller does not include terminating Pods.
    Terminating,
}

/// Why the Pod cannot be an endpoint, or `None` when it can. The
/// EndpointSlice controller always includes terminating Pods; the Endpoints
/// controller only with `publishNotReadyAddresses`.
#[inline]
pub fn ineligibility<P: PodView>(pod: &P, include_terminating: bool) -> Option<Ineligible> {
    if is_terminal(pod) {
        Some(Ineligible::Terminal)
    } else if !has_ip(pod) {
        Some(Ineligible::NoIp)
    } else if !include_terminating && is_terminating(pod) {
        Some(Ineligible::Terminating)
    } else {
        None
    }
}

/// Whether the Pod can be an endpoint at all (see [`ineligibility`]).
#[inline]
pub fn is_eligible<P: PodView>(pod: &P, include_terminating: bool) -> bool {
    ineligibility(pod, include_terminating).is_none()
}

/// The hostname to publish: `spec.hostname` when the Pod's subdomain names
/// this Service in the same namespace.
pub fn published_hostname<'a, P: PodView>(pod: &'a P, service: &Service) -> Option<&'a str> {
    let hostname = pod.hostname().filter(|h| !h.is_empty())?;
    let same_subdomain = pod.subdomain() == service.metadata.name.as_deref();
    // An unset namespace reads as "" on both sides.
    let same_namespace =
        pod.namespace() == service.metadata.namespace.as_deref().unwrap_or_default();
    (same_subdomain && same_namespace).then_some(hostname)
}

/// The Service port protocol as stored by the API server (defaulted to TCP).
#[inline]
pub fn service_port_protocol(port: &ServicePort) -> &str {
    port.protocol.as_deref().unwrap_or(DEFAULT_PROTOCOL)
}

/// Resolves a Service port's `targetPort` on a Pod (ES-1.3). An integer is
/// used as is; a name is looked up in the regular containers, then in the
/// sidecars (`initContainers` with `restartPolicy: Always`), matching name and
/// protocol. An absent `targetPort` means the Service `port` (API default).
pub fn find_port<P: PodView>(pod: &P, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod.find_named_port(name, service_port_protocol(port)),
    }
}

/// Reason of the Warning on a Pod whose status carries an address no parser accepts
/// (svcplane's own; upstream would write it and have the slice refused).
pub const REASON_INVALID_POD_IP: &str = "InvalidPodIP";

/// The Warning for a Pod with unparseable `status.podIPs`, if it has any: the
/// reconcilers leave such addresses out silently, so the Pod is told why.
pub fn invalid_pod_ip_event<P: PodView + ?Sized>(pod: &P) -> Option<PlannedEvent> {
    let bad: Vec<String> = pod
        .pod_ips()
        .filter(|a| crate::core::ip::parse_sloppy(a).is_none())
        .map(|a| format!("{a:?}"))
        .collect();
    (!bad.is_empty()).then(|| {
        PlannedEvent::warning(
            REASON_INVALID_POD_IP,
            format!(
                "status.podIPs has unparseable address(es) {}; left out of EndpointSlices and Endpoints",
                bad.join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use rstest::rstest;

    fn pod_with(status: PodStatus) -> Pod {
        Pod {
            status: Some(status),
            ..Pod::default()
        }
    }

    fn cond(status: &str) -> PodStatus {
        PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }
    }

    #[rstest]
    #[case::true_is_ready("True", true)]
    #[case::false_is_not("False", false)]
    #[case::unknown_is_not("Unknown", false)]
    #[case::lowercase_is_not("true", false)]
    fn rule_1_2_ready_means_condition_exactly_true(#[case] status: &str, #[case] ready: bool) {
        assert_eq!(is_ready(&pod_with(cond(status))), ready);
    }

    #[test]
    fn rule_1_2_no_ready_condition_means_not_ready() {
        assert!(!is_ready(&Pod::default()));
        assert!(!is_ready(&pod_with(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        })));
    }

    #[rstest]
    #[case::succeeded("Succeeded", true)]
    #[case::failed("Failed", true)]
    #[case::running("Running", false)]
    #[case::pending("Pending", false)]
    #[case::unknown("Unknown", false)]
    fn rule_1_2_terminal_phases(#[case] phase: &str, #[case] terminal: bool) {
        let p = pod_with(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        assert_eq!(is_terminal(&p), terminal);
    }

    #[test]
    fn rule_1_2_has_ip_reads_pod_ip_or_pod_ips() {
        assert!(!has_ip(&Pod::default()));
        assert!(has_ip(&pod_with(PodStatus {
            pod_ip: Some("10.0.0.1".into()),
            ..PodStatus::default()
        })));
        assert!(has_ip(&pod_with(PodStatus {
            pod_ips: Some(vec![PodIP {
                ip: "10.0.0.1".into()
            }]),
            ..PodStatus::default()
        })));
        assert!(!has_ip(&pod_with(PodStatus {
            pod_ip: Some(String::new()),
            pod_ips: Some(vec![]),
            ..PodStatus::default()
        })));
    }

    #[test]
    fn rule_1_2_eligible_excludes_terminal_ipless_and_optionally_terminating() {
        let mut p = pod_with(PodStatus {
            pod_ip: Some("10.0.0.1".into()),
            phase: Some("Running".into()),
            ..PodStatus::default()
        });
        assert!(is_eligible(&p, false));
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(is_eligible(&p, true));
        assert!(!is_eligible(&p, false));
        p.metadata.deletion_timestamp = None;
        if let Some(s) = p.status.as_mut() {
            s.phase = Some("Failed".into());
        }
        assert!(!is_eligible(&p, true));
    }

    fn named_pod(ns: &str, hostname: Option<&str>, subdomain: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                hostname: hostname.map(Into::into),
                subdomain: subdomain.map(Into::into),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn svc(ns: &str, name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    #[rstest]
    #[case::matching(named_pod("ns", Some("h"), Some("db")), Some("h"))]
    #[case::other_subdomain(named_pod("ns", Some("h"), Some("other")), None)]
    #[case::no_subdomain(named_pod("ns", Some("h"), None), None)]
    #[case::empty_hostname(named_pod("ns", Some(""), Some("db")), None)]
    #[case::other_namespace(named_pod("other", Some("h"), Some("db")), None)]
    fn rule_1_2_set_hostname_needs_subdomain_equal_service_name(
        #[case] pod: Pod,
        #[case] want: Option<&str>,
    ) {
        assert_eq!(published_hostname(&pod, &svc("ns", "db")), want);
    }

    fn port(name: &str, number: i32, protocol: &str) -> ContainerPort {
        ContainerPort {
            name: Some(name.into()),
            container_port: number,
            protocol: Some(protocol.into()),
            ..ContainerPort::default()
        }
    }

    fn container(ports: Vec<ContainerPort>, restart: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            ports: Some(ports),
            restart_policy: restart.map(Into::into),
            ..Container::default()
        }
    }

    fn svc_port(target: IntOrString, protocol: &str) -> ServicePort {
        ServicePort {
            port: 80,
            target_port: Some(target),
            protocol: Some(protocol.into()),
            ..ServicePort::default()
        }
    }

    #[test]
    fn rule_1_3_integer_target_port_is_used_without_lookup() {
        let p = Pod::default();
        assert_eq!(
            find_port(&p, &svc_port(IntOrString::Int(8080), "TCP")),
            Some(8080)
        );
        assert_eq!(
            find_port(&p, &svc_port(IntOrString::Int(0), "TCP")),
            Some(0)
        );
    }

    #[test]
    fn rule_1_3_named_port_matches_name_and_protocol_first_wins() {
        let p = crate::core::fixtures::pod_with_containers(
            vec![
                container(vec![port("http", 1, "UDP"), port("http", 2, "TCP")], None),
                container(vec![port("http", 3, "TCP")], None),
            ],
            vec![],
        );
        let sp = svc_port(IntOrString::String("http".into()), "TCP");
        assert_eq!(find_port(&p, &sp), Some(2));
        let udp = svc_port(IntOrString::String("http".into()), "UDP");
        assert_eq!(find_port(&p, &udp), Some(1));
        let sctp = svc_port(IntOrString::String("http".into()), "SCTP");
        assert_eq!(find_port(&p, &sctp), None);
    }

    #[test]
    fn rule_1_3_sidecars_only_with_restart_policy_always_and_after_regular() {
        let sp = svc_port(IntOrString::String("metrics".into()), "TCP");
        let plain_init = crate::core::fixtures::pod_with_containers(
            vec![],
            vec![container(vec![port("metrics", 9, "TCP")], None)],
        );
        assert_eq!(find_port(&plain_init, &sp), None);
        let sidecar = crate::core::fixtures::pod_with_containers(
            vec![],
            vec![container(vec![port("metrics", 9, "TCP")], Some("Always"))],
        );
        assert_eq!(find_port(&sidecar, &sp), Some(9));
        let both = crate::core::fixtures::pod_with_containers(
            vec![container(vec![port("metrics", 7, "TCP")], None)],
            vec![container(vec![port("metrics", 9, "TCP")], Some("Always"))],
        );
        assert_eq!(find_port(&both, &sp), Some(7));
    }

    #[test]
    fn rule_1_3_container_port_returned_as_is() {
        let p = crate::core::fixtures::pod_with_containers(
            vec![container(vec![port("odd", -1, "TCP")], None)],
            vec![],
        );
        let sp = svc_port(IntOrString::String("odd".into()), "TCP");
        assert_eq!(find_port(&p, &sp), Some(-1));
    }

    #[test]
    fn updates_that_withdraw_an_endpoint_are_told_from_those_that_add() {
        use crate::core::fixtures::pod;
        let base = || pod("a", "web").ip("10.0.0.1");
        let withdraws = |old: Pod, new: Pod| update_withdraws(&old, &new);
        assert!(withdraws(
            base().ready().build(),
            base().not_ready().build()
        ));
        assert!(withdraws(
            base().ready().build(),
            base().ready().terminating().build()
        ));
        assert!(withdraws(
            base().ready().build(),
            base().ready().phase("Failed").build()
        ));
        assert!(withdraws(
            base().ready().build(),
            pod("a", "web").ip("10.0.0.2").ready().build()
        ));
        assert!(withdraws(
            base().ready().build(),
            base().ready().label("tier", "x").build()
        ));
        assert!(!withdraws(
            base().not_ready().build(),
            base().ready().build()
        ));
        assert!(!withdraws(
            pod("a", "web").not_ready().build(),
            base().not_ready().build()
        ));
        assert!(!withdraws(base().ready().build(), base().ready().build()));
    }
}
