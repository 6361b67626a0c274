//! A compact, read-only copy of the Pod fields the endpoint reconcilers read.
//!
//! The runtime caches every Pod of the cluster with a budget of 2.5 KB per
//! Pod. A k8s-openapi `Pod` is over 2 KB inline before any of its strings,
//! and every `Container` adds another 2 KB, so the cache keeps a
//! [`CachedPod`] instead: only what [`PodView`] exposes, in boxed strings and
//! slices (no spare capacity, no map nodes). A typical Deployment Pod takes
//! about 600 bytes; see the `typical_deployment_pod_fits_the_budget` test.
//!
//! Conversion consumes the `Pod`, so strings are moved, not copied.

use k8s_openapi::api::core::v1::{ContainerPort, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

use crate::core::pod::{DEFAULT_PROTOCOL, PodView, is_sidecar};

/// The Pod fields [`PodView`] reads, and nothing else.
///
/// Layout choices, for memory: `Box<str>`/`Box<[_]>` (16 bytes, no
/// capacity word) instead of `String`/`Vec`; labels as a sorted slice
/// looked up by binary search instead of a `BTreeMap` (whose leaf node alone
/// is ~500 bytes); phase and port protocol as small enums that only allocate
/// for values the API server would not produce; timestamps without the
/// `Option` tag, their presence kept in flags that fill padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPod {
    namespace: Box<str>,
    name: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    /// Sorted by key, keys unique (they come from a map).
    labels: Box<[(Box<str>, Box<str>)]>,
    node_name: Option<Box<str>>,
    hostname: Option<Box<str>>,
    subdomain: Option<Box<str>>,
    /// `status.podIP`, unless it equals `podIPs[0]` (the API server keeps
    /// them equal, so nearly always): then `pod_ip_is_first` is set and the
    /// string is stored once.
    pod_ip: Option<Box<str>>,
    pod_ips: Box<[Box<str>]>,
    /// Named ports of the regular containers, then of the sidecars, in
    /// order: the search order of ES-1.3. Unnamed ports are dropped, since only
    /// a named `targetPort` ever looks a port up.
    named_ports: Box<[NamedPort]>,
    phase: Phase,
    /// Meaningful only when `has_deletion_timestamp`.
    deletion_timestamp: Timestamp,
    /// Meaningful only when `has_ready_transition_time`.
    ready_transition_time: Timestamp,
    has_deletion_timestamp: bool,
    has_ready_transition_time: bool,
    ready: bool,
    pod_ip_is_first: bool,
}

/// `status.phase`. Only an unexpected value allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Unset,
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
    Other(Box<str>),
}

impl Phase {
    fn from_api(phase: Option<String>) -> Self {
        let Some(phase) = phase else {
            return Phase::Unset;
        };
        match phase.as_str() {
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            "Unknown" => Phase::Unknown,
            _ => Phase::Other(phase.into_boxed_str()),
        }
    }

    fn as_str(&self) -> Option<&str> {
        Some(match self {
            Phase::Unset => return None,
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
            Phase::Other(s) => s,
        })
    }

    fn heap_size(&self) -> usize {
        match self {
            Phase::Other(s) => s.len(),
            _ => 0,
        }
    }
}

/// A container port protocol, `TCP` when unset. Only an unexpected value
/// allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Protocol {
    Tcp,
    Udp,
    Sctp,
    Other(Box<str>),
}

impl Protocol {
    fn from_api(protocol: Option<String>) -> Self {
        let Some(protocol) = protocol else {
            return Protocol::Tcp;
        };
        match protocol.as_str() {
            DEFAULT_PROTOCOL => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => Protocol::Other(protocol.into_boxed_str()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Protocol::Tcp => DEFAULT_PROTOCOL,
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
            Protocol::Other(s) => s,
        }
    }
}

/// A container port that has a name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NamedPort {
    name: Box<str>,
    protocol: Protocol,
    number: i32,
}

impl NamedPort {
    fn from_api(port: ContainerPort) -> Option<Self> {
        Some(NamedPort {
            name: port.name?.into_boxed_str(),
            protocol: Protocol::from_api(port.protocol),
            number: port.container_port,
        })
    }

    fn heap_size(&self) -> usize {
        self.name.len()
            + match &self.protocol {
                Protocol::Other(s) => s.len(),
                _ => 0,
            }
    }
}

fn boxed(s: Option<String>) -> Option<Box<str>> {
    s.map(String::into_boxed_str)
}

fn len_of(s: &Option<Box<str>>) -> usize {
    s.as_deref().map_or(0, str::len)
}

impl CachedPod {
    /// `size_of::<CachedPod>()` on 64-bit targets, kept here so a layout
    /// change that grows every cached Pod shows up in review (a test checks
    /// it).
    pub const INLINE_SIZE: usize = 240;

    /// Copies what [`PodView`] reads out of `pod`, moving its strings.
    pub fn from_pod(pod: Pod) -> CachedPod {
        let Pod {
            metadata,
            spec,
            status,
        } = pod;
        let labels: Vec<(Box<str>, Box<str>)> = metadata
            .labels
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect();

        let (node_name, hostname, subdomain, named_ports) = match spec {
            None => (None, None, None, Vec::new()),
            Some(spec) => {
                let sidecars = spec
                    .init_containers
                    .into_iter()
                    .flatten()
                    .filter(is_sidecar);
                let named_ports: Vec<NamedPort> = spec
                    .containers
                    .into_iter()
                    .chain(sidecars)
                    .flat_map(|c| c.ports.into_iter().flatten())
                    .filter_map(NamedPort::from_api)
                    .collect();
                (spec.node_name, spec.hostname, spec.subdomain, named_ports)
            }
        };

        let mut phase = None;
        let mut pod_ip = None;
        let mut pod_ips: Vec<Box<str>> = Vec::new();
        let mut ready_condition: Option<PodCondition> = None;
        if let Some(status) = status {
            phase = status.phase;
            pod_ip = status.pod_ip;
            pod_ips = status
                .pod_ips
                .into_iter()
                .flatten()
                .map(|ip| ip.ip.into_boxed_str())
                .collect();
            // The first Ready condition, as `PodView for Pod` reads it.
            ready_condition = status
                .conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Ready");
        }
        let pod_ip_is_first =
            pod_ip.is_some() && pod_ip.as_deref() == pod_ips.first().map(|s| &**s);
        let ready = ready_condition.as_ref().is_some_and(|c| c.status == "True");
        let ready_transition_time = ready_condition
            .and_then(|c| c.last_transition_time)
            .map(|t| t.0);
        let deletion_timestamp = metadata.deletion_timestamp.map(|t| t.0);

        CachedPod {
            namespace: metadata.namespace.unwrap_or_default().into_boxed_str(),
            name: metadata.name.unwrap_or_default().into_boxed_str(),
            uid: boxed(metadata.uid),
            resource_version: boxed(metadata.resource_version),
            // A BTreeMap iterates in key order, so the slice is sorted.
            labels: labels.into_boxed_slice(),
            node_name: boxed(node_name),
            hostname: boxed(hostname),
            subdomain: boxed(subdomain),
            pod_ip: if pod_ip_is_first { None } else { boxed(pod_ip) },
            pod_ips: pod_ips.into_boxed_slice(),
            named_ports: named_ports.into_boxed_slice(),
            phase: Phase::from_api(phase),
            deletion_timestamp: deletion_timestamp.unwrap_or(Timestamp::UNIX_EPOCH),
            ready_transition_time: ready_transition_time.unwrap_or(Timestamp::UNIX_EPOCH),
            has_deletion_timestamp: deletion_timestamp.is_some(),
            has_ready_transition_time: ready_transition_time.is_some(),
            ready,
            pod_ip_is_first,
        }
    }

    /// Approximate bytes this Pod owns on the heap: the sum of its
    /// allocations' sizes. The allocator adds its own rounding and header
    /// (with glibc, up to ~24 bytes per allocation), which is not counted.
    pub fn heap_size(&self) -> usize {
        let strings = self.namespace.len()
            + self.name.len()
            + len_of(&self.uid)
            + len_of(&self.resource_version)
            + len_of(&self.node_name)
            + len_of(&self.hostname)
            + len_of(&self.subdomain)
            + len_of(&self.pod_ip);
        let labels = size_of_val::<[(Box<str>, Box<str>)]>(&self.labels)
            + self
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        let pod_ips = size_of_val::<[Box<str>]>(&self.pod_ips)
            + self.pod_ips.iter().map(|ip| ip.len()).sum::<usize>();
        let ports = size_of_val::<[NamedPort]>(&self.named_ports)
            + self
                .named_ports
                .iter()
                .map(NamedPort::heap_size)
                .sum::<usize>();
        strings + labels + pod_ips + ports + self.phase.heap_size()
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        CachedPod::from_pod(pod)
    }
}

// `#[inline]` for the same reason as on `impl PodView for Pod`.
impl PodView for CachedPod {
    #[inline]
    fn namespace(&self) -> &str {
        &self.namespace
    }

    #[inline]
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    #[inline]
    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    #[inline]
    fn label(&self, key: &str) -> Option<&str> {
        let i = self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        self.labels.get(i).map(|(_, v)| &**v)
    }

    #[inline]
    fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    #[inline]
    fn deletion_timestamp(&self) -> Option<Timestamp> {
        self.has_deletion_timestamp
            .then_some(self.deletion_timestamp)
    }

    #[inline]
    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    #[inline]
    fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }

    #[inline]
    fn subdomain(&self) -> Option<&str> {
        self.subdomain.as_deref()
    }

    #[inline]
    fn phase(&self) -> Option<&str> {
        self.phase.as_str()
    }

    #[inline]
    fn is_ready(&self) -> bool {
        self.ready
    }

    #[inline]
    fn ready_transition_time(&self) -> Option<Timestamp> {
        self.has_ready_transition_time
            .then_some(self.ready_transition_time)
    }

    #[inline]
    fn pod_ip(&self) -> Option<&str> {
        if self.pod_ip_is_first {
            self.pod_ips.first().map(|s| &**s)
        } else {
            self.pod_ip.as_deref()
        }
    }

    #[inline]
    fn pod_ips(&self) -> impl Iterator<Item = &str> {
        self.pod_ips.iter().map(|s| &**s)
    }

    #[inline]
    fn find_named_port(&self, name: &str, protocol: &str) -> Option<i32> {
        self.named_ports
            .iter()
            .find(|p| &*p.name == name && p.protocol.as_str() == protocol)
            .map(|p| p.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Container, PodIP, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::core::fixtures::{epoch, pod};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn port(name: Option<&str>, number: i32, protocol: Option<&str>) -> ContainerPort {
        ContainerPort {
            name: name.map(Into::into),
            container_port: number,
            protocol: protocol.map(Into::into),
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

    fn with_status(status: PodStatus) -> Pod {
        Pod {
            status: Some(status),
            ..Pod::default()
        }
    }

    /// Every `PodView` read, as owned values, to compare two views.
    fn reads<P: PodView>(p: &P) -> Vec<String> {
        vec![
            format!("{:?}", p.namespace()),
            format!("{:?}", p.name()),
            format!("{:?}", p.uid()),
            format!("{:?}", p.resource_version()),
            format!("{:?}", p.labels().collect::<Vec<_>>()),
            format!("{:?}", p.deletion_timestamp()),
            format!("{:?}", p.node_name()),
            format!("{:?}", p.hostname()),
            format!("{:?}", p.subdomain()),
            format!("{:?}", p.phase()),
            format!("{:?}", p.is_ready()),
            format!("{:?}", p.ready_transition_time()),
            format!("{:?}", p.pod_ip()),
            format!("{:?}", p.pod_ips().collect::<Vec<_>>()),
        ]
    }

    fn same_reads(p: Pod) -> CachedPod {
        let want = reads(&p);
        let cached = CachedPod::from(p);
        assert_eq!(reads(&cached), want);
        cached
    }

    #[test]
    fn size_of_cached_pod_is_pinned() {
        assert_eq!(size_of::<CachedPod>(), CachedPod::INLINE_SIZE);
    }

    #[test]
    fn metadata_fields_are_copied() {
        let mut p = pod("web-1", "web").ready().build();
        p.metadata.resource_version = Some("42".into());
        p.metadata.deletion_timestamp = Some(Time(ts("2024-05-01T10:00:00.5Z")));
        let c = same_reads(p);
        assert_eq!(c.namespace(), "default");
        assert_eq!(c.name(), "web-1");
        assert_eq!(c.uid(), Some("uid-pod-web-1"));
        assert_eq!(c.resource_version(), Some("42"));
        assert_eq!(c.deletion_timestamp(), Some(ts("2024-05-01T10:00:00.5Z")));
    }

    #[test]
    fn empty_pod_reads_as_unset() {
        let c = same_reads(Pod::default());
        assert_eq!((c.namespace(), c.name()), ("", ""));
        assert_eq!(c.uid(), None);
        assert_eq!(c.resource_version(), None);
        assert_eq!(c.labels().count(), 0);
        assert_eq!(c.label("app"), None);
        assert_eq!(c.deletion_timestamp(), None);
        assert_eq!(c.node_name(), None);
        assert_eq!(c.phase(), None);
        assert!(!c.is_ready());
        assert_eq!(c.ready_transition_time(), None);
        assert_eq!(c.pod_ip(), None);
        assert_eq!(c.pod_ips().count(), 0);
        assert_eq!(c.find_named_port("http", "TCP"), None);
        assert_eq!(c.heap_size(), 0);
    }

    #[test]
    fn labels_are_sorted_and_looked_up_by_key() {
        let mut p = Pod::default();
        p.metadata.labels = Some(BTreeMap::from(
            [
                ("tier", "web"),
                ("app", "a"),
                ("Zeta", "z"),
                ("app.kubernetes.io/name", "n"),
                ("", "empty"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        ));
        let c = same_reads(p);
        let keys: Vec<&str> = c.labels().map(|(k, _)| k).collect();
        assert_eq!(keys, ["", "Zeta", "app", "app.kubernetes.io/name", "tier"]);
        assert_eq!(c.label("app"), Some("a"));
        assert_eq!(c.label("tier"), Some("web"));
        assert_eq!(c.label("Zeta"), Some("z"));
        assert_eq!(c.label(""), Some("empty"));
        assert_eq!(c.label("ap"), None);
        assert_eq!(c.label("zeta"), None);
    }

    #[test]
    fn spec_fields_are_copied() {
        let c = same_reads(pod("p", "a").node("node-b").hostname("h", "db").build());
        assert_eq!(c.node_name(), Some("node-b"));
        assert_eq!(c.hostname(), Some("h"));
        assert_eq!(c.subdomain(), Some("db"));
    }

    #[test]
    fn no_status_reads_as_not_ready_without_ips() {
        let mut p = pod("p", "a").ip("10.0.0.1").ready().build();
        p.status = None;
        let c = same_reads(p);
        assert_eq!(c.phase(), None);
        assert!(!c.is_ready());
        assert_eq!(c.ready_transition_time(), None);
        assert_eq!(c.pod_ip(), None);
        assert_eq!(c.pod_ips().count(), 0);
    }

    #[test]
    fn phases_known_and_unknown() {
        for phase in [
            "Pending",
            "Running",
            "Succeeded",
            "Failed",
            "Unknown",
            "",
            "Weird",
        ] {
            let c = same_reads(with_status(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }));
            assert_eq!(c.phase(), Some(phase));
        }
    }

    #[test]
    fn pod_ip_equal_to_first_pod_ips_entry_is_stored_once() {
        let c = same_reads(pod("p", "a").ips(&["10.0.0.1", "fd00::1"]).build());
        assert!(c.pod_ip_is_first && c.pod_ip.is_none());
        assert_eq!(c.pod_ip(), Some("10.0.0.1"));
        assert_eq!(c.pod_ips().collect::<Vec<_>>(), ["10.0.0.1", "fd00::1"]);
    }

    #[test]
    fn pod_ip_without_pod_ips_or_different_is_kept() {
        let only_pod_ip = same_reads(with_status(PodStatus {
            pod_ip: Some("10.0.0.1".into()),
            pod_ips: Some(vec![]),
            ..PodStatus::default()
        }));
        assert_eq!(only_pod_ip.pod_ip(), Some("10.0.0.1"));
        assert_eq!(only_pod_ip.pod_ips().count(), 0);
        assert!(crate::core::pod::has_ip(&only_pod_ip));

        let different = same_reads(with_status(PodStatus {
            pod_ip: Some("10.0.0.9".into()),
            pod_ips: Some(vec![PodIP {
                ip: "10.0.0.1".into(),
            }]),
            ..PodStatus::default()
        }));
        assert_eq!(different.pod_ip(), Some("10.0.0.9"));
        assert_eq!(different.pod_ips().collect::<Vec<_>>(), ["10.0.0.1"]);

        let empty = same_reads(with_status(PodStatus {
            pod_ip: Some(String::new()),
            pod_ips: Some(vec![PodIP { ip: String::new() }]),
            ..PodStatus::default()
        }));
        assert_eq!(empty.pod_ip(), Some(""));
        assert_eq!(empty.pod_ips().collect::<Vec<_>>(), [""]);

        let ips_only = same_reads(with_status(PodStatus {
            pod_ips: Some(vec![PodIP {
                ip: "10.0.0.1".into(),
            }]),
            ..PodStatus::default()
        }));
        assert_eq!(ips_only.pod_ip(), None);
    }

    #[test]
    fn ready_condition_true_false_missing() {
        let at = ts("2024-01-02T03:04:05Z");
        let ready = same_reads(pod("p", "a").ready_at(at).build());
        assert!(ready.is_ready());
        assert_eq!(ready.ready_transition_time(), Some(at));

        let not_ready = same_reads(pod("p", "a").not_ready().build());
        assert!(!not_ready.is_ready());
        assert_eq!(not_ready.ready_transition_time(), Some(epoch()));

        let missing = same_reads(pod("p", "a").build());
        assert!(!missing.is_ready());
        assert_eq!(missing.ready_transition_time(), None);
    }

    #[test]
    fn only_the_first_ready_condition_counts() {
        let cond = |type_: &str, status: &str, at: Option<&str>| PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: at.map(|t| Time(ts(t))),
            ..PodCondition::default()
        };
        let c = same_reads(with_status(PodStatus {
            conditions: Some(vec![
                cond("ContainersReady", "True", Some("2024-01-01T00:00:00Z")),
                cond("Ready", "Unknown", None),
                cond("Ready", "True", Some("2024-02-01T00:00:00Z")),
            ]),
            ..PodStatus::default()
        }));
        assert!(!c.is_ready());
        assert_eq!(c.ready_transition_time(), None);
    }

    #[test]
    fn regular_container_port_wins_over_sidecar_of_the_same_name() {
        let p = crate::core::fixtures::pod_with_containers(
            vec![container(vec![port(Some("metrics"), 7, None)], None)],
            vec![container(
                vec![port(Some("metrics"), 9, None)],
                Some("Always"),
            )],
        );
        assert_eq!(p.find_named_port("metrics", "TCP"), Some(7));
        let c = CachedPod::from(p);
        assert_eq!(c.find_named_port("metrics", "TCP"), Some(7));
    }

    #[test]
    fn sidecar_ports_kept_plain_init_container_ports_dropped() {
        let c = CachedPod::from(crate::core::fixtures::pod_with_containers(
            vec![],
            vec![
                container(vec![port(Some("setup"), 1, None)], None),
                container(vec![port(Some("setup"), 2, None)], Some("OnFailure")),
                container(vec![port(Some("proxy"), 15001, None)], Some("Always")),
            ],
        ));
        assert_eq!(c.find_named_port("setup", "TCP"), None);
        assert_eq!(c.find_named_port("proxy", "TCP"), Some(15001));
        assert_eq!(c.named_ports.len(), 1);
    }

    #[test]
    fn unnamed_ports_are_dropped_empty_names_kept() {
        let c = CachedPod::from(crate::core::fixtures::pod_with_containers(
            vec![container(
                vec![
                    port(None, 80, None),
                    port(Some(""), 81, None),
                    port(Some("http"), 8080, None),
                ],
                None,
            )],
            vec![],
        ));
        let names: Vec<&str> = c.named_ports.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["", "http"]);
        // An empty name is what `targetPort: ""` would look up on a Pod too.
        assert_eq!(c.find_named_port("", "TCP"), Some(81));
    }

    #[test]
    fn protocol_defaults_to_tcp_and_must_match() {
        let p = crate::core::fixtures::pod_with_containers(
            vec![container(
                vec![
                    port(Some("dns"), 53, Some("UDP")),
                    port(Some("dns"), 5353, None),
                    port(Some("assoc"), 9, Some("SCTP")),
                    port(Some("odd"), 10, Some("tcp")),
                    port(Some("blank"), 11, Some("")),
                ],
                None,
            )],
            vec![],
        );
        let lookups = [
            ("dns", "UDP"),
            ("dns", "TCP"),
            ("dns", "SCTP"),
            ("assoc", "SCTP"),
            ("assoc", "TCP"),
            ("odd", "tcp"),
            ("odd", "TCP"),
            ("blank", ""),
            ("blank", "TCP"),
            ("missing", "TCP"),
        ];
        let want: Vec<Option<i32>> = lookups
            .iter()
            .map(|(n, proto)| p.find_named_port(n, proto))
            .collect();
        assert_eq!(
            want,
            [
                Some(53),
                Some(5353),
                None,
                Some(9),
                None,
                Some(10),
                None,
                Some(11),
                None,
                None
            ]
        );
        let c = CachedPod::from(p);
        let got: Vec<Option<i32>> = lookups
            .iter()
            .map(|(n, proto)| c.find_named_port(n, proto))
            .collect();
        assert_eq!(got, want);
    }

    /// A Deployment Pod as the API server stores it: three labels, one
    /// container with two named ports, one IP.
    fn typical_deployment_pod() -> Pod {
        let mut p = pod("web-7d4b9c8f6d-x2k9p", "web")
            .ip("10.244.17.203")
            .node("ip-10-0-12-34.eu-west-1.compute.internal")
            .container_port("http", 8080)
            .container_port("metrics", 9090)
            .ready()
            .build();
        p.metadata.uid = Some("0b6f1c2e-6a55-4d0e-9d7c-3f1b2a9e8c41".into());
        p.metadata.resource_version = Some("123456789".into());
        if let Some(labels) = p.metadata.labels.as_mut() {
            labels.insert("pod-template-hash".into(), "7d4b9c8f6d".into());
            labels.insert("tier".into(), "frontend".into());
        }
        p
    }

    #[test]
    fn typical_deployment_pod_fits_the_budget() {
        let c = CachedPod::from(typical_deployment_pod());
        let total = size_of::<CachedPod>() + c.heap_size();
        // 240 inline + 389 on the heap when this was written (plus ~17
        // allocations' malloc overhead); the runtime's budget is 2.5 KB per
        // Pod.
        assert_eq!(c.heap_size(), 389, "heap size changed: update the docs");
        assert!(total < 1024, "{total} bytes");
    }
}
