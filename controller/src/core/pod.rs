//! Pod predicates and Service-port resolution shared by the endpoint
//! reconcilers (endpoints-spec §1.2, §1.3).

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The `Ready` condition is exactly `True`; phase and containers are not read.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// `status.phase` is `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// `status.podIP` or `status.podIPs` is non-empty.
pub fn has_ip(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
            || s.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty())
    })
}

/// `metadata.deletionTimestamp` is set.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the Pod can be an endpoint at all. The EndpointSlice controller
/// always includes terminating Pods; the Endpoints controller only with
/// `publishNotReadyAddresses`.
pub fn is_eligible(pod: &Pod, include_terminating: bool) -> bool {
    !is_terminal(pod) && has_ip(pod) && (include_terminating || !is_terminating(pod))
}

/// The hostname to publish: `spec.hostname` when the Pod's subdomain names
/// this Service in the same namespace.
pub fn published_hostname<'a>(pod: &'a Pod, service: &Service) -> Option<&'a str> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    let same_subdomain = spec.subdomain.as_deref() == service.metadata.name.as_deref();
    let same_namespace = pod.metadata.namespace == service.metadata.namespace;
    (same_subdomain && same_namespace).then_some(hostname)
}

/// The Service port protocol as stored by the API server (defaulted to TCP).
pub fn service_port_protocol(port: &ServicePort) -> &str {
    port.protocol.as_deref().unwrap_or("TCP")
}

/// Resolves a Service port's `targetPort` on a Pod (§1.3). An integer is
/// used as is; a name is looked up in the regular containers, then in the
/// sidecars (`initContainers` with `restartPolicy: Always`), matching name and
/// protocol. An absent `targetPort` means the Service `port` (API default).
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let name = match &port.target_port {
        None => return Some(port.port),
        Some(IntOrString::Int(n)) => return Some(*n),
        Some(IntOrString::String(name)) => name,
    };
    let protocol = service_port_protocol(port);
    let spec = pod.spec.as_ref()?;
    let regular = spec.containers.iter();
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    regular
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name.as_str())
                && p.protocol.as_deref().unwrap_or("TCP") == protocol
        })
        .map(|p| p.container_port)
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

    fn pod_spec(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                ..PodSpec::default()
            }),
            ..Pod::default()
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
        let p = pod_spec(
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
        let plain_init = pod_spec(
            vec![],
            vec![container(vec![port("metrics", 9, "TCP")], None)],
        );
        assert_eq!(find_port(&plain_init, &sp), None);
        let sidecar = pod_spec(
            vec![],
            vec![container(vec![port("metrics", 9, "TCP")], Some("Always"))],
        );
        assert_eq!(find_port(&sidecar, &sp), Some(9));
        let both = pod_spec(
            vec![container(vec![port("metrics", 7, "TCP")], None)],
            vec![container(vec![port("metrics", 9, "TCP")], Some("Always"))],
        );
        assert_eq!(find_port(&both, &sp), Some(7));
    }

    #[test]
    fn rule_1_3_container_port_returned_as_is() {
        let p = pod_spec(vec![container(vec![port("odd", -1, "TCP")], None)], vec![]);
        let sp = svc_port(IntOrString::String("odd".into()), "TCP");
        assert_eq!(find_port(&p, &sp), Some(-1));
    }
}
