//! The plan of a move out of a Service range: which Services hold an address in it,
//! what each gets in the target range, and which must be moved by hand and why.
//!
//! Pure: the cluster comes in as a [`Snapshot`], the random picks from a seeded
//! [`Rng`], so a plan is reproducible. A ClusterIP cannot be changed, so moving a
//! Service means deleting and creating it again with the same spec but its
//! ClusterIPs; nodePorts stay. Some Services must not be recreated blindly:
//! - `default/kubernetes`: kube-apiserver keeps it at the first address of its own
//!   `--service-cluster-ip-range` and recreates it there;
//! - the cluster DNS Service: kubelets hand its address to every Pod as nameserver
//!   (`clusterDNS` in the kubelet configuration);
//! - a Service whose address is in the static band of its range, where only
//!   addresses chosen by hand go (automatic picks reach it only when the dynamic band
//!   is full): whoever chose it may depend on it;
//! - a Service whose address another Service names (`externalIPs`,
//!   `loadBalancerIP`, an annotation);
//! - a Service without a selector whose endpoints are kept by hand: the Endpoints
//!   controller deletes a Service's Endpoints object with the Service (and the
//!   mirroring controller the slices mirrored from it), and the garbage collector
//!   the EndpointSlices it owns, so a recreate would leave it with none.

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;
use svcplane_allocator::range::parse_ip_sloppy;
use svcplane_allocator::{Cidr, CidrAllocator, IpFamily, Rng};

use crate::core::service_values::{cluster_ips, node_ports};
use crate::dump::snapshot::{Key, Snapshot};

/// One side of the move: CIDRs, and the ServiceCIDR they came from, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    pub cidrs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_cidr: Option<String>,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPlan {
    pub from: Side,
    pub to: Side,
    /// The Services to recreate, in the order to recreate them.
    pub moves: Vec<Move>,
    /// The Services in the old range left to the operator, with why and how.
    pub manual: Vec<Manual>,
    /// Headless Services in the namespaces: nothing to move.
    pub headless: usize,
    /// What each recreated Service's clients should expect, as measured.
    pub expected_disruption: Disruption,
}

/// What moving one Service costs its clients, as the e2e measured it with the shipped
/// binary (`e2e_service_cidrs::migrate_apply_moves_200_services_and_an_interrupted_run_resumes`
/// on kube-apiserver, `e2e_operator` step 6b on the single-node cluster); the figures
/// are the worst of the runs recorded in docs/reference/migrate.md.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Median and maximum time the Service exists nowhere (delete to create).
    pub gap_ms_median: u64,
    pub gap_ms_max: u64,
    /// Median and maximum time from the delete until its EndpointSlices are back.
    pub slices_ms_median: u64,
    pub slices_ms_max: u64,
    /// How long a client calling it by name failed on a real cluster: the cluster
    /// DNS's TTL on the old address, then kube-proxy's sync.
    pub by_name_ms: u64,
}

/// The measured figures (see [`Disruption`]).
pub const MEASURED: Disruption = Disruption {
    gap_ms_median: 96,
    gap_ms_max: 209,
    slices_ms_median: 291,
    slices_ms_max: 681,
    by_name_ms: 5200,
};

/// One Service to recreate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// `namespace/name`.
    pub service: String,
    pub cluster_ips: Vec<String>,
    /// Its ClusterIPs after the move (an address outside the old range is kept).
    pub new_cluster_ips: Vec<String>,
    /// The nodePorts it keeps (healthCheckNodePort included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_ports: Vec<i32>,
}

/// One Service the plan does not move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manual {
    pub service: String,
    pub cluster_ips: Vec<String>,
    /// Why it is not moved, and what to do.
    pub reason: String,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--{flag} {value:?}: neither a CIDR nor the name of a ServiceCIDR{where_}")]
    UnknownRange {
        flag: &'static str,
        value: String,
        where_: String,
    },
    #[error("--from and --to overlap ({from} and {to}): the target must be another range")]
    Overlap { from: String, to: String },
    #[error("target range {cidr}: {reason}")]
    Target { cidr: String, reason: String },
}

/// Reads `--from`/`--to`: a CIDR, or the name of a ServiceCIDR of `snapshot`.
pub fn side(
    flag: &'static str,
    value: &str,
    snapshot: &Snapshot,
    where_: &str,
) -> Result<(Side, Vec<Cidr>), PlanError> {
    if let Ok(cidr) = Cidr::parse(value) {
        let side = Side {
            cidrs: vec![cidr.to_string()],
            service_cidr: None,
        };
        return Ok((side, vec![cidr]));
    }
    let unknown = || PlanError::UnknownRange {
        flag,
        value: value.to_owned(),
        where_: where_.to_owned(),
    };
    let object = snapshot.service_cidrs.get(value).ok_or_else(unknown)?;
    let cidrs: Vec<Cidr> = object
        .spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Cidr::parse(c).ok())
        .collect();
    if cidrs.is_empty() {
        return Err(unknown());
    }
    let side = Side {
        cidrs: cidrs.iter().map(ToString::to_string).collect(),
        service_cidr: Some(value.to_owned()),
    };
    Ok((side, cidrs))
}

/// The plan of moving every Service with an address in `from` to `to`.
pub fn plan(
    snapshot: &Snapshot,
    (from_side, from): (Side, Vec<Cidr>),
    (to_side, to): (Side, Vec<Cidr>),
    seed: u64,
) -> Result<MigrationPlan, PlanError> {
    for a in &from {
        if let Some(b) = to
            .iter()
            .find(|b| a.contains_network_of(b) || b.contains_network_of(a))
        {
            return Err(PlanError::Overlap {
                from: a.to_string(),
                to: b.to_string(),
            });
        }
    }
    let mut targets = Vec::new();
    for cidr in &to {
        let mut r = CidrAllocator::new(*cidr).map_err(|e| PlanError::Target {
            cidr: cidr.to_string(),
            reason: e.to_string(),
        })?;
        // Addresses already taken in the target stay taken.
        for svc in snapshot.services.values() {
            for ip in cluster_ips(svc) {
                let _ = r.allocate(ip);
            }
        }
        targets.push(r);
    }
    let statics: Vec<CidrAllocator> = from
        .iter()
        .filter_map(|c| CidrAllocator::new(*c).ok())
        .collect();
    let names = Names::of(snapshot);
    let hand_kept = hand_kept_endpoints(snapshot);
    let mut rng = Rng::new(seed);
    let mut moves = Vec::new();
    let mut manual = Vec::new();
    let mut headless = 0;
    for (key, svc) in &snapshot.services {
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
            headless += 1;
            continue;
        }
        let ips = cluster_ips(svc);
        if !ips.iter().any(|ip| from.iter().any(|c| c.contains(*ip))) {
            continue;
        }
        let shown: Vec<String> = ips.iter().map(ToString::to_string).collect();
        let reason = hand_kept
            .get(key)
            .cloned()
            .or_else(|| left_to_operator(key, svc, &ips, &statics, &names));
        if let Some(reason) = reason {
            manual.push(Manual {
                service: key.to_string(),
                cluster_ips: shown,
                reason,
            });
            continue;
        }
        let mut new_ips = Vec::new();
        let mut missing = None;
        for ip in &ips {
            if !from.iter().any(|c| c.contains(*ip)) {
                new_ips.push(ip.to_string());
                continue;
            }
            let family = IpFamily::of(ip);
            let picked = targets
                .iter_mut()
                .filter(|r| r.family() == family)
                .find_map(|r| r.allocate_next(&mut rng).ok());
            match picked {
                Some(new) => new_ips.push(new.to_string()),
                None => missing = Some(family),
            }
        }
        if let Some(family) = missing {
            manual.push(Manual {
                service: key.to_string(),
                cluster_ips: shown,
                reason: format!(
                    "the target has no free {} address: move to a larger range, or add one \
                     to the target ServiceCIDR",
                    family.as_str()
                ),
            });
            continue;
        }
        moves.push(Move {
            service: key.to_string(),
            cluster_ips: shown,
            new_cluster_ips: new_ips,
            node_ports: node_ports(svc),
        });
    }
    Ok(MigrationPlan {
        from: from_side,
        to: to_side,
        moves,
        manual,
        headless,
        expected_disruption: MEASURED,
    })
}

/// The Services without a selector whose endpoints someone keeps by hand and a delete
/// would take with it, with what they are: an Endpoints object of the same name (for a
/// Service without selector no controller writes one), or EndpointSlices of another
/// manager that the Service owns.
fn hand_kept_endpoints(snapshot: &Snapshot) -> HashMap<Key, String> {
    use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
    let controllers = [
        crate::core::endpointslice::CONTROLLER_NAME,
        crate::core::mirroring::CONTROLLER_NAME,
    ];
    let mut out = HashMap::new();
    for (key, svc) in &snapshot.services {
        if !crate::core::migrated::endpoints_kept_by_others(svc) {
            continue;
        }
        let (ns, name) = (&key.namespace, &key.name);
        if snapshot.endpoints.contains_key(key) {
            out.insert(
                key.clone(),
                format!(
                    "it has no selector and its Endpoints object is kept by hand: the Endpoints \
                     controller deletes it with the Service (and the mirroring controller the \
                     EndpointSlices mirrored from it): save it (kubectl get endpoints -n {ns} \
                     {name} -o yaml), recreate the Service with an address of the target, then \
                     create the Endpoints again"
                ),
            );
            continue;
        }
        let uid = svc.metadata.uid.as_deref();
        let owned_slice = snapshot.endpoint_slices.iter().find_map(|(k, slice)| {
            let labels = slice.metadata.labels.as_ref();
            (k.namespace == key.namespace
                && labels.and_then(|l| l.get(LABEL_SERVICE_NAME)) == Some(&key.name)
                && !labels
                    .and_then(|l| l.get(LABEL_MANAGED_BY))
                    .is_some_and(|m| controllers.contains(&m.as_str()))
                && uid.is_some_and(|uid| {
                    slice
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.uid == uid)
                }))
            .then(|| {
                labels
                    .and_then(|l| l.get(LABEL_MANAGED_BY))
                    .map_or_else(|| "someone".to_owned(), Clone::clone)
            })
        });
        if let Some(manager) = owned_slice {
            out.insert(
                key.clone(),
                format!(
                    "it has no selector and owns EndpointSlices that {manager} keeps: the garbage \
                     collector deletes them with the Service: save them (kubectl get \
                     endpointslices -n {ns} -l kubernetes.io/service-name={name} -o yaml), \
                     recreate the Service with an address of the target, then create them again \
                     owned by the new Service (or have {manager} do it)"
                ),
            );
        }
    }
    out
}

/// Why the Service `key` is left to the operator, if it is.
fn left_to_operator(
    key: &Key,
    svc: &Service,
    ips: &[IpAddr],
    old_ranges: &[CidrAllocator],
    names: &Names,
) -> Option<String> {
    if key.namespace == "default" && key.name == "kubernetes" {
        return Some(
            "kube-apiserver owns it and recreates it at the first address of its \
             --service-cluster-ip-range: change that flag on every kube-apiserver (and its \
             `kubernetes` ServiceCIDR), then delete the Service"
                .to_owned(),
        );
    }
    let labels = svc.metadata.labels.as_ref();
    if key.namespace == "kube-system"
        && labels.and_then(|l| l.get("k8s-app")).map(String::as_str) == Some("kube-dns")
    {
        return Some(
            "the cluster DNS: kubelets give its address to every Pod as nameserver \
             (clusterDNS): recreate it with an address of the target, change clusterDNS on \
             every kubelet, then restart the Pods"
                .to_owned(),
        );
    }
    for ip in ips {
        if let Some(r) = old_ranges
            .iter()
            .find(|r| r.offset_of(*ip).is_some() && r.band_offset() > 0 && !r.in_upper_band(*ip))
        {
            return Some(format!(
                "{ip} is in the static band of {} (hand-picked addresses): whoever chose it \
                 may depend on it; pick its new address by hand",
                r.cidr()
            ));
        }
    }
    for ip in ips {
        if let Some((other, field)) = names
            .named_by
            .get(ip)
            .and_then(|v| v.iter().find(|(k, _)| k != key))
        {
            return Some(format!(
                "Service {other} names its address in {field}: move both by hand"
            ));
        }
    }
    for (ip, field) in names_in(svc) {
        let in_old = old_ranges.iter().any(|r| r.cidr().contains(ip));
        if let Some(holder) = names.holder.get(&ip).filter(|h| *h != key && in_old) {
            return Some(format!(
                "its {field} names the address of Service {holder}: move both by hand"
            ));
        }
    }
    None
}

/// Which Service names which address (`spec.externalIPs`, `spec.loadBalancerIP`, an
/// annotation), and which Service holds each ClusterIP: read once for the whole plan.
struct Names {
    named_by: HashMap<IpAddr, Vec<(Key, String)>>,
    holder: HashMap<IpAddr, Key>,
}

impl Names {
    fn of(snapshot: &Snapshot) -> Self {
        let mut names = Names {
            named_by: HashMap::new(),
            holder: HashMap::new(),
        };
        for (key, svc) in &snapshot.services {
            for ip in cluster_ips(svc) {
                names.holder.entry(ip).or_insert_with(|| key.clone());
            }
            for (ip, field) in names_in(svc) {
                names
                    .named_by
                    .entry(ip)
                    .or_default()
                    .push((key.clone(), field));
            }
        }
        names
    }
}

/// Every address `svc` names outside its ClusterIPs, with the field naming it.
fn names_in(svc: &Service) -> Vec<(IpAddr, String)> {
    let mut out = Vec::new();
    let spec = svc.spec.as_ref();
    for s in spec
        .and_then(|s| s.external_ips.as_ref())
        .into_iter()
        .flatten()
    {
        out.extend(parse_ip_sloppy(s).map(|ip| (ip, "spec.externalIPs".to_owned())));
    }
    if let Some(ip) = spec
        .and_then(|s| s.load_balancer_ip.as_deref())
        .and_then(parse_ip_sloppy)
    {
        out.push((ip, "spec.loadBalancerIP".to_owned()));
    }
    for (k, v) in svc.metadata.annotations.iter().flatten() {
        for ip in v.split([',', ' ']).filter_map(parse_ip_sloppy) {
            out.push((ip, format!("annotation {k}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn snapshot() -> Snapshot {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/migrate/cluster.yaml");
        crate::explain::world::read_dump(&[path], &mut std::io::empty())
            .expect("the dump reads")
            .0
            .snapshot
    }

    fn make(from: &str, to: &str) -> Result<MigrationPlan, PlanError> {
        let s = snapshot();
        plan(&s, side("from", from, &s, "")?, side("to", to, &s, "")?, 1)
    }

    /// Every Service with an address in the old range moves, in name order, to free
    /// addresses of the target (one already there keeps its own); an address of
    /// another family stays; nodePorts are kept; headless Services need nothing.
    #[test]
    fn movable_services_get_free_addresses_of_the_target() {
        let p = make("kubernetes", "new").unwrap();
        let moved: Vec<&str> = p.moves.iter().map(|m| m.service.as_str()).collect();
        assert_eq!(moved, ["shop/dual", "shop/web"]);
        let target = Cidr::parse("10.100.0.0/24").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for m in &p.moves {
            let first: IpAddr = m.new_cluster_ips[0].parse().unwrap();
            assert!(target.contains(first), "{m:?}");
            assert_ne!(m.new_cluster_ips[0], "10.100.0.50", "taken already");
            assert!(seen.insert(first), "two Services got {first}");
        }
        assert_eq!(
            p.moves[0].new_cluster_ips[1], "fd00:10:96::5",
            "the IPv6 address stays"
        );
        assert_eq!(p.moves[1].node_ports, [30080]);
        assert_eq!(p.headless, 1);
        assert_eq!(p.from.service_cidr.as_deref(), Some("kubernetes"));
        // Reproducible.
        assert_eq!(make("kubernetes", "new").unwrap(), p);
    }

    /// The kubernetes Service, the cluster DNS, a hand-picked (static band) address, an
    /// address another Service names, and a Service without selector whose endpoints
    /// are kept by hand are left to the operator, each with why; a Service without
    /// selector and without such endpoints (shop/web) moves.
    #[test]
    fn services_that_must_not_be_recreated_blindly_are_left_with_the_reason() {
        let p = make("10.96.0.0/24", "10.100.0.0/24").unwrap();
        let manual: Vec<(&str, &str)> = p
            .manual
            .iter()
            .map(|m| {
                (
                    m.service.as_str(),
                    m.reason.split(':').next().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            manual,
            [
                (
                    "default/kubernetes",
                    "kube-apiserver owns it and recreates it at the first address of its --service-cluster-ip-range"
                ),
                ("kube-system/kube-dns", "the cluster DNS"),
                (
                    "shop/cache",
                    "Service shop/edge names its address in spec.externalIPs"
                ),
                (
                    "shop/edge",
                    "its spec.externalIPs names the address of Service shop/cache"
                ),
                (
                    "shop/feed",
                    "it has no selector and owns EndpointSlices that example.com/feeder keeps"
                ),
                (
                    "shop/legacy-db",
                    "it has no selector and its Endpoints object is kept by hand"
                ),
                (
                    "shop/pinned",
                    "10.96.0.5 is in the static band of 10.96.0.0/24 (hand-picked addresses)"
                ),
            ]
        );
        assert_eq!(p.from.service_cidr, None, "given as a CIDR");
    }

    /// Bad `--from`/`--to`: an unknown name, and overlapping ranges.
    #[test]
    fn an_unknown_range_or_an_overlap_is_refused_naming_it() {
        let e = make("old", "new").unwrap_err().to_string();
        assert_eq!(
            e,
            "--from \"old\": neither a CIDR nor the name of a ServiceCIDR"
        );
        let e = make("kubernetes", "10.96.0.128/25")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--from and --to overlap (10.96.0.0/24 and 10.96.0.128/25)"),
            "{e}"
        );
    }

    /// A target without room for every Service leaves the rest to the operator.
    #[test]
    fn a_full_target_leaves_the_rest() {
        // Two usable addresses, one taken by shop/moved-already.
        let p = make("kubernetes", "10.100.0.48/30").unwrap();
        assert_eq!(p.moves.len(), 1, "{p:?}");
        assert_eq!(p.moves[0].new_cluster_ips[0], "10.100.0.49");
        assert!(
            p.manual
                .iter()
                .any(|m| m.reason.starts_with("the target has no free IPv4 address")),
            "{p:?}"
        );
    }
}
