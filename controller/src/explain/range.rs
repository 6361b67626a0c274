//! `explain range`: every ClusterIP range (the cluster's ServiceCIDRs, or the flags')
//! and the NodePort range, each split into its static and dynamic bands: how many
//! values each band has and uses, how many automatic picks are left before they
//! spill into the static band, and which namespaces hold the most.
//!
//! The counts are the webhook's own: the stored Services, claims and IPAddress
//! objects are recorded into its [`AllocationState`] exactly as `explain ip` does
//! ([`state_of`]), and the bands are its allocators' (`min(max(16, size/16), 256)`
//! values for a ClusterIP range, `min(max(16, size/32), 128)` ports for NodePorts).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;
use svcplane_allocator::ip_allocator::CidrAllocator;
use svcplane_allocator::node_port::PortAllocator;
use svcplane_allocator::range::IpFamily;
use svcplane_allocator::range_scope::RangeScope;
use svcplane_allocator::service_cidrs::cluster_ranges;
use svcplane_allocator::{AllocatorConfig, Claim};
use svcplane_webhook::state::AllocationState;

use super::allocation::{api_notes, state_of};
use super::world::World;
use crate::core::migrated::MoveInProgress;
use crate::core::service_values::{cluster_ips, node_ports};

/// How many namespaces a range lists as its largest holders.
pub const TOP_NAMESPACES: usize = 5;

/// Everything `explain range` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RangesReport {
    /// Where the ClusterIP ranges come from.
    pub cluster_ip_source: String,
    pub cluster_ip_ranges: Vec<RangeBands>,
    pub node_port_range: RangeBands,
    /// What could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One range and its two bands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeBands {
    /// `10.96.0.0/12`, or `30000-32767` for NodePorts.
    pub range: String,
    /// `IPv4`, `IPv6` or `NodePort`.
    pub kind: &'static str,
    /// The ServiceCIDR objects naming it (none for a range from the flags).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub service_cidrs: Vec<String>,
    /// Whether new values come from it: a range whose ServiceCIDRs are all being
    /// deleted or not ready keeps its values but hands out none.
    pub hands_out: bool,
    /// The namespaces it serves, when its ServiceCIDRs select them
    /// (`svcplane.io/namespace-selector`); absent: every namespace no selector binds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serves: Option<String>,
    /// Of the used values, those retained for deleted Services
    /// (`--retain-released-values`).
    #[serde(skip_serializing_if = "is_zero")]
    pub retained: u64,
    /// The move out of it `svcplane migrate --apply` has in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moving: Option<MoveInProgress>,
    /// Values it can hand out (a ClusterIP range's network and IPv4 broadcast
    /// addresses excluded).
    pub size: u64,
    pub used: u64,
    /// The lower band, for hand-picked values; absent when the range is too small
    /// to have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub static_band: Option<Band>,
    /// The upper band, which automatic picks search first.
    pub dynamic_band: Band,
    /// Automatic picks left before they take values of the static band.
    pub picks_before_static: u64,
    /// The namespaces whose Services hold the most of its values, most first.
    pub top_namespaces: Vec<NamespaceCount>,
}

/// One band of a range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Band {
    pub first: String,
    pub last: String,
    pub size: u64,
    pub used: u64,
    /// Of the used values, those retained for deleted Services.
    #[serde(skip_serializing_if = "is_zero")]
    pub retained: u64,
    pub free: u64,
}

/// How many values of a range one namespace's Services hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceCount {
    pub namespace: String,
    pub values: u64,
}

/// Explains every range of `config` (the ranges `explain` reasons with, see
/// [`super::allocation::ranges_of`]) over `world`.
pub fn explain_ranges(
    world: &World,
    config: &AllocatorConfig,
    from_cluster: bool,
) -> Result<RangesReport, String> {
    let state = state_of(world, config)?;
    let objects = cluster_ranges(&world.snapshot.service_cidr_views());
    let retained: Vec<Claim> = state.retained_claims().iter().map(|r| r.value).collect();
    let services: Vec<&Service> = world
        .snapshot
        .services
        .values()
        .map(|s| s.as_ref())
        .collect();
    let mut cluster_ip_ranges = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let Some(fam) = state.allocators().family(family) else {
            continue;
        };
        for r in fam.ranges() {
            let object = objects
                .iter()
                .find(|o| o.cidr == *r.cidr())
                .filter(|_| from_cluster);
            let retained_ips: Vec<IpAddr> = retained
                .iter()
                .filter_map(|v| match v {
                    Claim::Ip(ip) if r.offset_of(*ip).is_some() => Some(*ip),
                    _ => None,
                })
                .collect();
            let mut bands = cidr_bands(
                r,
                family,
                object.map(|o| o.objects.clone()).unwrap_or_default(),
                &services,
                &retained_ips,
            );
            bands.serves = object
                .map(|o| &o.scope)
                .filter(|s| **s != RangeScope::Everyone)
                .map(RangeScope::describe);
            bands.moving = world
                .moves
                .iter()
                .find(|m| bands.service_cidrs.contains(&m.from))
                .cloned();
            cluster_ip_ranges.push(bands);
        }
    }
    let notes = range_notes(world, &cluster_ip_ranges);
    Ok(RangesReport {
        cluster_ip_source: if from_cluster {
            "the cluster's ServiceCIDR objects".to_owned()
        } else {
            "--service-cluster-ip-range".to_owned()
        },
        cluster_ip_ranges,
        node_port_range: port_bands(
            &state,
            &services,
            &retained
                .iter()
                .filter_map(|v| match v {
                    Claim::NodePort(p) => Some(*p),
                    Claim::Ip(_) => None,
                })
                .collect::<Vec<i32>>(),
        ),
        notes,
    })
}

/// What could not be read, and a move whose old ServiceCIDR is gone while Services
/// are still between their delete and their create (shown nowhere else).
fn range_notes(world: &World, ranges: &[RangeBands]) -> Vec<String> {
    let mut out = api_notes(world);
    out.extend(world.moves_unread.clone());
    for m in &world.moves {
        let shown = ranges.iter().any(|r| r.service_cidrs.contains(&m.from));
        if !shown && !m.in_flight.is_empty() {
            out.push(format!(
                "svcplane migrate's move from ServiceCIDR {} (gone) to {}: {} Service(s) exist only in its journal {}: {}; `svcplane migrate --from {} --to {} --apply` creates them",
                m.from,
                m.to,
                m.in_flight.len(),
                m.journal,
                m.in_flight.join(", "),
                m.from,
                m.to
            ));
        }
    }
    out
}

fn cidr_bands(
    r: &CidrAllocator,
    family: IpFamily,
    service_cidrs: Vec<String>,
    services: &[&Service],
    retained: &[IpAddr],
) -> RangeBands {
    let (static_used, dynamic_used) = split_used(r.allocated(), |ip| r.in_upper_band(*ip));
    let (static_retained, dynamic_retained) =
        split_used(retained.iter().copied(), |ip| r.in_upper_band(*ip));
    let split = r.band_offset();
    let last = r.last_address().map_or_else(String::new, |a| a.to_string());
    let static_band = (split > 0).then(|| Band {
        first: r.ip_at(0).to_string(),
        last: r.ip_at(split - 1).to_string(),
        size: split,
        used: static_used,
        retained: static_retained,
        free: split.saturating_sub(static_used),
    });
    let dynamic_size = r.size().saturating_sub(split);
    let dynamic_band = Band {
        first: r.ip_at(split).to_string(),
        last,
        size: dynamic_size,
        used: dynamic_used,
        retained: dynamic_retained,
        free: dynamic_size.saturating_sub(dynamic_used),
    };
    let counts = count_by_namespace(services, |svc| {
        cluster_ips(svc)
            .into_iter()
            .filter(|ip| r.offset_of(*ip).is_some())
            .count()
    });
    RangeBands {
        range: r.cidr().to_string(),
        kind: family.as_str(),
        service_cidrs,
        hands_out: r.is_ready(),
        serves: None,
        moving: None,
        retained: retained.len() as u64,
        size: r.size(),
        used: r.used(),
        picks_before_static: if r.is_ready() { dynamic_band.free } else { 0 },
        static_band,
        dynamic_band,
        top_namespaces: counts,
    }
}

fn port_bands(state: &AllocationState, services: &[&Service], retained: &[i32]) -> RangeBands {
    let p: &PortAllocator = state.allocators().node_ports();
    let range = p.range();
    let (static_used, dynamic_used) = split_used(p.allocated(), |port| p.in_upper_band(*port));
    let (static_retained, dynamic_retained) =
        split_used(retained.iter().copied(), |port| p.in_upper_band(*port));
    let size = u64::from(range.size());
    let split = p.band_offset();
    let at = |offset: u64| (u64::from(range.base()) + offset).to_string();
    let static_band = (split > 0).then(|| Band {
        first: at(0),
        last: at(split - 1),
        size: split,
        used: static_used,
        retained: static_retained,
        free: split.saturating_sub(static_used),
    });
    let dynamic_size = size.saturating_sub(split);
    let dynamic_band = Band {
        first: at(split),
        last: range.last().to_string(),
        size: dynamic_size,
        used: dynamic_used,
        retained: dynamic_retained,
        free: dynamic_size.saturating_sub(dynamic_used),
    };
    let counts = count_by_namespace(services, |svc| {
        node_ports(svc)
            .into_iter()
            .filter(|port| range.contains(*port))
            .count()
    });
    RangeBands {
        range: format!("{}-{}", range.base(), range.last()),
        kind: "NodePort",
        service_cidrs: Vec::new(),
        hands_out: true,
        serves: None,
        moving: None,
        retained: retained.len() as u64,
        size,
        used: p.used(),
        picks_before_static: dynamic_band.free,
        static_band,
        dynamic_band,
        top_namespaces: counts,
    }
}

/// Values in use, split into (static band, dynamic band).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn split_used<T>(used: impl Iterator<Item = T>, dynamic: impl Fn(&T) -> bool) -> (u64, u64) {
    used.fold(
        (0, 0),
        |(s, d), v| if dynamic(&v) { (s, d + 1) } else { (s + 1, d) },
    )
}

/// The namespaces whose Services hold the most values (`count` of one Service),
/// most first, then by name; at most [`TOP_NAMESPACES`].
fn count_by_namespace(
    services: &[&Service],
    count: impl Fn(&Service) -> usize,
) -> Vec<NamespaceCount> {
    let mut by_namespace: BTreeMap<&str, u64> = BTreeMap::new();
    for svc in services {
        let n = count(svc) as u64;
        if n > 0 {
            *by_namespace
                .entry(svc.metadata.namespace.as_deref().unwrap_or_default())
                .or_default() += n;
        }
    }
    let mut out: Vec<NamespaceCount> = by_namespace
        .into_iter()
        .map(|(namespace, values)| NamespaceCount {
            namespace: namespace.to_owned(),
            values,
        })
        .collect();
    // Stable: equal counts stay in name order.
    out.sort_by_key(|n| std::cmp::Reverse(n.values));
    out.truncate(TOP_NAMESPACES);
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::explain::world::read_dump;

    fn world(yaml: &str) -> World {
        read_dump(&[PathBuf::from("-")], &mut yaml.as_bytes())
            .expect("the dump reads")
            .0
    }

    fn service(ns: &str, name: &str, ip: &str, node_port: Option<i32>) -> String {
        let ports = match node_port {
            Some(p) => format!("type: NodePort, ports: [{{port: 80, nodePort: {p}}}]"),
            None => "ports: [{port: 80}]".to_owned(),
        };
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{namespace: {ns}, name: {name}}}\n\
             spec: {{clusterIP: {ip}, clusterIPs: [{ip}], {ports}}}\n---\n"
        )
    }

    /// `explain`'s range flags when the ClusterIP ranges come from the ServiceCIDRs.
    fn from_cluster_objects() -> crate::cli::AllocatorRanges {
        crate::cli::AllocatorRanges {
            service_cluster_ip_range: None,
            service_node_port_range: "30000-32767".into(),
            service_ranges_from: crate::cli::RangesFrom::Cluster,
        }
    }

    fn flags(cidr: &str, ports: &str) -> AllocatorConfig {
        AllocatorConfig::from_flags(cidr, ports).expect("valid ranges")
    }

    /// AL-2.3, AL-5: a /24 has 254 addresses, the first 16 its static band; used and
    /// free per band, the picks left before the static band, the namespaces holding
    /// the most (most first, then by name).
    #[test]
    fn bands_of_a_flag_range_with_their_counts() {
        let w = world(&format!(
            "{}{}{}{}",
            service("a", "pinned", "10.96.0.5", Some(30010)),
            service("b", "one", "10.96.0.100", Some(30500)),
            service("b", "two", "10.96.0.101", None),
            service("c", "elsewhere", "10.97.0.1", None),
        ));
        let r = explain_ranges(&w, &flags("10.96.0.0/24", "30000-30999"), false).unwrap();
        assert_eq!(r.cluster_ip_source, "--service-cluster-ip-range");
        let [ip] = &r.cluster_ip_ranges[..] else {
            panic!("{r:#?}")
        };
        assert_eq!(
            (ip.range.as_str(), ip.kind, ip.size, ip.used),
            ("10.96.0.0/24", "IPv4", 254, 3)
        );
        assert!(ip.hands_out && ip.service_cidrs.is_empty());
        assert_eq!(
            ip.static_band,
            Some(Band {
                first: "10.96.0.1".into(),
                last: "10.96.0.16".into(),
                size: 16,
                used: 1,
                retained: 0,
                free: 15,
            })
        );
        assert_eq!(
            ip.dynamic_band,
            Band {
                first: "10.96.0.17".into(),
                last: "10.96.0.254".into(),
                size: 238,
                used: 2,
                retained: 0,
                free: 236,
            }
        );
        assert_eq!(ip.picks_before_static, 236);
        let top: Vec<(&str, u64)> = ip
            .top_namespaces
            .iter()
            .map(|n| (n.namespace.as_str(), n.values))
            .collect();
        assert_eq!(top, [("b", 2), ("a", 1)], "outside the range: not counted");
        // NodePorts: 1000 ports, a static band of 1000/32 = 31.
        let np = &r.node_port_range;
        assert_eq!(
            (np.range.as_str(), np.size, np.used),
            ("30000-30999", 1000, 2)
        );
        let static_band = np.static_band.as_ref().unwrap();
        assert_eq!(
            (static_band.first.as_str(), static_band.last.as_str()),
            ("30000", "30030")
        );
        assert_eq!((static_band.used, np.dynamic_band.used), (1, 1));
        assert_eq!(np.picks_before_static, 1000 - 31 - 1);
    }

    /// AL-3: with ServiceCIDR objects the ranges are theirs, named; a range whose
    /// only ServiceCIDR is being deleted keeps its values and hands out none.
    #[test]
    fn service_cidr_ranges_are_named_and_a_deleted_one_hands_out_nothing() {
        let w = world(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: kubernetes}}\n\
             spec: {{cidrs: [10.100.0.0/24]}}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\n\
             metadata: {{name: retiring, deletionTimestamp: '2026-01-02T00:00:00Z'}}\n\
             spec: {{cidrs: [10.101.0.0/24]}}\n---\n{}",
            service("shop", "kept", "10.101.0.20", None)
        ));
        let ranges = from_cluster_objects();
        let (config, from_cluster) = super::super::allocation::ranges_of(&w, &ranges).unwrap();
        assert!(from_cluster);
        let r = explain_ranges(&w, &config, from_cluster).unwrap();
        assert_eq!(r.cluster_ip_source, "the cluster's ServiceCIDR objects");
        let summary: Vec<(&str, &[String], bool, u64, u64)> = r
            .cluster_ip_ranges
            .iter()
            .map(|b| {
                (
                    b.range.as_str(),
                    &b.service_cidrs[..],
                    b.hands_out,
                    b.used,
                    b.picks_before_static,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "10.100.0.0/24",
                    &["kubernetes".to_owned()][..],
                    true,
                    0,
                    238
                ),
                ("10.101.0.0/24", &["retiring".to_owned()][..], false, 1, 0),
            ]
        );
        // `--service-ranges-from=flags`: the flag's range stands.
        let (config, from_cluster) = super::super::allocation::ranges_of(
            &w,
            &crate::cli::AllocatorRanges {
                service_ranges_from: crate::cli::RangesFrom::Flags,
                ..ranges
            },
        )
        .unwrap();
        assert!(!from_cluster);
        assert_eq!(config.cluster_ip_ranges[0].to_string(), "10.96.0.0/12");
    }

    /// Issue 33: a range `svcplane migrate --apply` is leaving shows the move from its
    /// journal, with the Services that exist only there; a journal whose old
    /// ServiceCIDR is gone while it still holds Services becomes a note.
    #[test]
    fn a_range_being_left_shows_the_move_and_the_services_only_in_its_journal() {
        let journal = |name: &str, from: &str, entries: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{namespace: kube-system, name: {name}, \
                 labels: {{svcplane.io/migrate-journal: 'true'}}, \
                 annotations: {{svcplane.io/migrate-from: {from}, svcplane.io/migrate-to: new}}}}\n\
                 data: {{{entries}}}\n---\n"
            )
        };
        let w = world(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: new}}\n\
             spec: {{cidrs: [10.100.0.0/24]}}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\n\
             metadata: {{name: old, deletionTimestamp: '2026-01-02T00:00:00Z'}}\n\
             spec: {{cidrs: [10.101.0.0/24]}}\n---\n{}{}{}",
            service("shop", "kept", "10.101.0.20", None),
            journal("j1", "old", "shop.web: '{}', shop.db: '{}'"),
            journal("j2", "older", "team.api: '{}'"),
        ));
        let ranges = from_cluster_objects();
        let (config, from_cluster) = super::super::allocation::ranges_of(&w, &ranges).unwrap();
        let r = explain_ranges(&w, &config, from_cluster).unwrap();
        let old = r
            .cluster_ip_ranges
            .iter()
            .find(|b| b.range == "10.101.0.0/24")
            .unwrap();
        let moving = old
            .moving
            .as_ref()
            .expect("the move shows on the old range");
        assert_eq!(
            (
                moving.to.as_str(),
                moving.journal.as_str(),
                &moving.in_flight[..]
            ),
            (
                "new",
                "kube-system/j1",
                &["shop/db".to_owned(), "shop/web".to_owned()][..]
            )
        );
        assert!(
            r.cluster_ip_ranges
                .iter()
                .all(|b| b.range == "10.101.0.0/24" || b.moving.is_none())
        );
        let text = crate::explain::text::ranges(&r);
        assert!(
            text.contains("svcplane migrate is moving its Services to ServiceCIDR new (journal kube-system/j1): 2 Service(s) deleted and not created yet: shop/db, shop/web"),
            "{text}"
        );
        assert!(
            r.notes.iter().any(|n| n.contains("from ServiceCIDR older (gone) to new: 1 Service(s) exist only in its journal kube-system/j2: team/api")),
            "{:?}",
            r.notes
        );
    }

    /// A ServiceCIDR with `svcplane.io/namespace-selector` says whom it serves; values
    /// retained for deleted Services are counted apart.
    #[test]
    fn a_selecting_servicecidr_names_whom_it_serves_and_retained_values_are_counted() {
        let w = world(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: kubernetes}}\n\
             spec: {{cidrs: [10.100.0.0/24]}}\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\n\
             metadata: {{name: team-a, annotations: {{svcplane.io/namespace-selector: team=a}}}}\n\
             spec: {{cidrs: [10.101.0.0/24]}}\n---\n\
             apiVersion: svcplane.io/v1alpha1\nkind: AllocationClaim\nmetadata: {{name: ip-10.101.0.9, uid: c1}}\n\
             spec: {{kind: ClusterIP, value: 10.101.0.9, service: {{namespace: a, name: gone}},\n\
             retained: {{until: '2026-12-01T00:00:00Z', field: 'clusterIPs[0]'}}}}\n---\n{}",
            service("a", "kept", "10.101.0.20", None)
        ));
        let ranges = from_cluster_objects();
        let (config, from_cluster) = super::super::allocation::ranges_of(&w, &ranges).unwrap();
        let r = explain_ranges(&w, &config, from_cluster).unwrap();
        let team = &r.cluster_ip_ranges[1];
        assert_eq!(
            team.serves.as_deref(),
            Some("namespaces matching \"team=a\" (team-a)")
        );
        assert_eq!((team.used, team.retained), (2, 1));
        // 10.101.0.9 is in the static band of the /24 (its first 16 addresses).
        let static_band = team.static_band.as_ref().unwrap();
        assert_eq!((static_band.retained, team.dynamic_band.retained), (1, 0));
        assert_eq!(r.cluster_ip_ranges[0].serves, None);
        let ip = super::super::allocation::explain_ip(&w, &config, "10.101.0.20".parse().unwrap())
            .unwrap();
        assert!(
            ip.range
                .detail
                .ends_with("; the range serves only namespaces matching \"team=a\" (team-a) (svcplane.io/namespace-selector)"),
            "{}",
            ip.range.detail
        );
        let gone = super::super::allocation::retained_for(&w, "a", "gone");
        assert_eq!(
            gone,
            "; its values are retained for its name until 2026-12-01T00:00:00Z (--retain-released-values): 10.101.0.9 (clusterIPs[0]). Create it again, leaving them to the allocator, to get them back"
        );
        assert_eq!(super::super::allocation::retained_for(&w, "a", "kept"), "");
        let text = crate::explain::text::ranges(&r);
        assert!(
            text.contains("10.101.0.0/24 (IPv4, ServiceCIDR team-a): 2 of 254 used (1 retained for deleted Services)\n    serves only namespaces matching \"team=a\" (team-a)"),
            "{text}"
        );
        assert!(
            text.contains("    band     values                    size  used  retained  free\n    static   10.101.0.1-10.101.0.16    16    1     1         15\n"),
            "{text}"
        );
    }

    /// AL-2.3: a range smaller than 16 addresses has no static band; every pick is
    /// automatic.
    #[test]
    fn a_small_range_has_no_static_band() {
        let r = explain_ranges(&world(""), &flags("10.96.0.0/28", "30000-30010"), false).unwrap();
        let ip = &r.cluster_ip_ranges[0];
        assert_eq!(
            (ip.static_band.as_ref(), ip.picks_before_static),
            (None, 14)
        );
        assert_eq!(ip.dynamic_band.first, "10.96.0.1");
        let text = crate::explain::text::ranges(&r);
        assert!(
            text.contains(
                "automatic picks before the static band: 14 (too small for a static band)"
            ),
            "{text}"
        );
    }
}
