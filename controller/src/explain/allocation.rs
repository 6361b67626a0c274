//! `explain ip` / `explain nodeport`: who holds a value, which range and band
//! it is in, and what the admission webhook would answer to a Service asking
//! for it.
//!
//! The webhook's own machinery does all of it: the stored Services, claims
//! and IPAddress objects are recorded into an
//! [`AllocationState`] through the webhook's [`HolderSource::record`] (what
//! its watches do), the holders are the state's, and the answer is the
//! webhook's mutating review ([`review::decode`] then [`review::mutate`]) of
//! a Service that hand-picks the value, so the message is word for word the
//! one a real request would get.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;
use serde_json::json;
use svcplane_allocator::range::{IpFamily, parse_ip_sloppy};
use svcplane_allocator::{AllocatorConfig, Claim, ConfigError};
use svcplane_webhook::claim::claim_name;
use svcplane_webhook::review::{self, Decoded, MutateDecision};
use svcplane_webhook::shell::holders::HolderSource;
use svcplane_webhook::state::{AllocationState, HolderKey, RetainedClaim, ServiceRef};

use super::world::{Availability, World};
use crate::cli::AllocatorRanges;

/// Namespace and name of the Service the probe review asks for: a namespace
/// name no cluster can have (namespaces are DNS labels, without dots), so the
/// probe never counts as the owner of a value.
pub const PROBE_NAMESPACE: &str = "svcplane.explain";
pub const PROBE_NAME: &str = "explain-probe";

/// Seed of the state's allocators; the probe hand-picks, so no random pick
/// shows in the answer.
const SEED: u64 = 0x5eed;

/// Everything `explain ip` / `explain nodeport` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueReport {
    /// `ClusterIP` or `NodePort`.
    pub kind: &'static str,
    pub value: String,
    /// Everyone holding the value; empty when it is free.
    pub holders: Vec<Holder>,
    /// Claims of the value that hold nothing (released, or not a valid lock).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inert_claims: Vec<Holder>,
    pub range: RangeReport,
    pub webhook: WebhookAnswer,
    /// What could not be read (kinds the API server does not serve).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One holder of the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// `Service`, `AllocationClaim`, `IPAddress` or `InFlight`.
    pub kind: &'static str,
    pub name: String,
    /// The Service it stands for, `namespace/name`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    pub detail: String,
}

/// The range and band the value is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeReport {
    /// The configured range containing it (`--service-cluster-ip-range`,
    /// `--service-node-port-range`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// `static`, `dynamic`, `none` (outside every range, or not a usable
    /// address of it).
    pub band: &'static str,
    pub detail: String,
}

/// What the webhook answers a Service that asks for the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAnswer {
    pub allowed: bool,
    /// HTTP status of a refusal (422 or 500).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    /// The refusal exactly as the client would see it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Warnings the client would see (a hand pick in the dynamic band).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What the answer means, in words.
    pub summary: String,
}

/// The ranges `explain` reasons with, and whether they are the cluster's: its
/// ServiceCIDR objects when `--service-ranges-from=cluster` and the world has some
/// that parse (the webhook follows them), else the flags'.
pub fn ranges_of(
    world: &World,
    flags: &AllocatorRanges,
) -> Result<(AllocatorConfig, bool), ConfigError> {
    let config = flags.config()?;
    if flags.follow_cluster()
        && let Some(cluster) = config.with_service_cidrs(&world.snapshot.service_cidr_views())
    {
        return Ok((cluster, true));
    }
    Ok((config, false))
}

/// The allocation state the webhook would have for this world: claims,
/// Services and IPAddress objects recorded as its watches record them.
pub fn state_of(world: &World, config: &AllocatorConfig) -> Result<AllocationState, String> {
    let mut state = AllocationState::new(config.allocators(SEED)?);
    // Claims first: a claim taken by a create is then bound to its Service
    // when the Service is recorded, as in a webhook that saw the claim made.
    for claim in world.claims.values() {
        claim.record(&mut state);
    }
    for service in world.snapshot.services.values() {
        service.as_ref().record(&mut state);
    }
    for address in world.snapshot.ip_addresses.values() {
        address.as_ref().record(&mut state);
    }
    Ok(state)
}

fn owner_name(o: &ServiceRef) -> String {
    let name = if o.name.is_empty() {
        format!("{}<generated>", o.generate_name)
    } else {
        o.name.clone()
    };
    format!("{}/{name}", o.namespace)
}

/// The fields of a Service holding `value`, for messages.
fn fields_holding(svc: &Service, value: Claim) -> Vec<String> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match value {
        Claim::Ip(ip) => {
            let ips = spec
                .cluster_ips
                .clone()
                .filter(|v| !v.is_empty())
                .or_else(|| spec.cluster_ip.clone().map(|c| vec![c]))
                .unwrap_or_default();
            for (i, s) in ips.iter().enumerate() {
                if parse_ip_sloppy(s) == Some(ip) {
                    out.push(format!("spec.clusterIPs[{i}]"));
                }
            }
        }
        Claim::NodePort(port) => {
            for (i, p) in spec.ports.iter().flatten().enumerate() {
                if p.node_port == Some(port) {
                    out.push(format!("spec.ports[{i}].nodePort"));
                }
            }
            if spec.health_check_node_port == Some(port) {
                out.push("spec.healthCheckNodePort".to_owned());
            }
        }
    }
    out
}

fn holders(world: &World, state: &AllocationState, value: Claim) -> (Vec<Holder>, Vec<Holder>) {
    let mut out = Vec::new();
    for h in state.holders(value) {
        let service = h.owner.as_ref().map(owner_name);
        let holder = match &h.key {
            HolderKey::Service { namespace, name } => {
                let key = crate::dump::snapshot::Key {
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                let fields = world
                    .snapshot
                    .services
                    .get(&key)
                    .map(|s| fields_holding(s, value))
                    .unwrap_or_default();
                Holder {
                    kind: "Service",
                    name: format!("{namespace}/{name}"),
                    service: None,
                    detail: if fields.is_empty() {
                        "holds it".to_owned()
                    } else {
                        format!("holds it in {}", fields.join(", "))
                    },
                }
            }
            HolderKey::Claim { name } => Holder {
                kind: "AllocationClaim",
                name: name.clone(),
                service,
                detail: match (state.claim_binding(name), retained(state, name)) {
                    (Some(uid), _) => format!(
                        "svcplane's lock for it, bound to the Service object with uid {uid}: released the moment that Service gives the value up"
                    ),
                    (None, Some(r)) => format!(
                        "retained for {}/{} since that Service was deleted (--retain-released-values), {}: only a Service created again under that name gets it; `kubectl delete allocationclaim {name}` releases it now",
                        r.service.namespace,
                        r.service.name,
                        match r.until {
                            Some(t) => format!("until {t}"),
                            None => "not stored yet".to_owned(),
                        }
                    ),
                    (None, None) => "svcplane's lock for it, not bound to a stored Service: a request in flight, or one that never completed (the repair loop deletes it after --claim-grace-period)".to_owned(),
                },
            },
            HolderKey::IpAddress { name } => Holder {
                kind: "IPAddress",
                name: name.clone(),
                detail: if service.is_some() {
                    "kube-apiserver's allocation record for it".to_owned()
                } else {
                    "an allocation record of something other than a Service".to_owned()
                },
                service,
            },
            HolderKey::Pending { request_uid } => Holder {
                kind: "InFlight",
                name: request_uid.clone(),
                service,
                detail: "reserved by an admission request whose claim is not stored yet".to_owned(),
            },
            // Namespaces hold no values.
            HolderKey::Namespace { .. } => continue,
        };
        out.push(holder);
    }
    out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    // A claim object of this value that holds nothing.
    let mut inert = Vec::new();
    let name = claim_name(value);
    if let Some(claim) = world.claims.get(&name)
        && !out.iter().any(|h| h.kind == "AllocationClaim")
    {
        let released = state.released_claims().iter().any(|r| r.name == name);
        inert.push(Holder {
            kind: "AllocationClaim",
            name: name.clone(),
            service: Some(owner_name(&claim.spec.owner())),
            detail: if released {
                "released: its Service gave the value up; the next request for it takes the claim over".to_owned()
            } else {
                "not a valid lock (its spec does not name this value): it holds nothing, and the repair loop deletes it".to_owned()
            },
        });
    }
    (out, inert)
}

/// The values stored as retained for Service `namespace/name`, as a sentence for a
/// "not found" answer (empty when none).
pub fn retained_for(world: &World, namespace: &str, name: &str) -> String {
    let mut values = Vec::new();
    let mut until = None;
    for c in world.claims.values() {
        let s = &c.spec;
        if let Some(r) = &s.retained
            && s.service.namespace == namespace
            && s.service.name == name
        {
            values.push(if r.field.is_empty() {
                s.value.clone()
            } else {
                format!("{} ({})", s.value, r.field)
            });
            until = until.max(Some(r.until.clone()));
        }
    }
    match until {
        None => String::new(),
        Some(until) => format!(
            "; its values are retained for its name until {until} (--retain-released-values): {}. Create it again, leaving them to the allocator, to get them back",
            values.join(", ")
        ),
    }
}

/// The retention of claim `name`, if it retains a deleted Service's value.
fn retained(state: &AllocationState, name: &str) -> Option<RetainedClaim> {
    state.retained_claims().into_iter().find(|r| r.name == name)
}

fn ip_range(state: &AllocationState, ip: IpAddr) -> RangeReport {
    let family = IpFamily::of(&ip);
    let Some(fam) = state.allocators().family(family) else {
        return RangeReport {
            range: None,
            band: "none",
            detail: format!(
                "no {} range is configured (--service-cluster-ip-range)",
                family.as_str()
            ),
        };
    };
    let Some(r) = fam.ranges().iter().find(|r| r.cidr().contains(ip)) else {
        let ranges: Vec<String> = fam.ranges().iter().map(|r| r.cidr().to_string()).collect();
        return RangeReport {
            range: None,
            band: "none",
            detail: format!(
                "outside every {} range ({})",
                family.as_str(),
                ranges.join(", ")
            ),
        };
    };
    let cidr = r.cidr().to_string();
    let held = format!("{} of its {} addresses held", r.used(), r.size());
    let Some(offset) = r.offset_of(ip) else {
        let which = if ip == r.cidr().network() {
            "the network address"
        } else {
            "the broadcast address"
        };
        return RangeReport {
            range: Some(cidr.clone()),
            band: "none",
            detail: format!("{which} of {cidr}: never handed out"),
        };
    };
    let last = r.last_address().map_or_else(String::new, |a| a.to_string());
    let (band, detail) = if r.band_offset() == 0 {
        (
            "dynamic",
            format!("{cidr} is too small for a static band; {held}"),
        )
    } else if offset < r.band_offset() {
        (
            "static",
            format!(
                "static band {}-{} (for hand-picked addresses; automatic picks reach it only when the dynamic band is full); {held}",
                r.ip_at(0),
                r.ip_at(r.band_offset() - 1)
            ),
        )
    } else {
        (
            "dynamic",
            format!(
                "dynamic band {}-{last} (automatic picks search it first); {held}",
                r.ip_at(r.band_offset())
            ),
        )
    };
    RangeReport {
        range: Some(cidr),
        band,
        detail,
    }
}

fn port_range(state: &AllocationState, port: i32) -> RangeReport {
    let ports = state.allocators().node_ports();
    let range = ports.range();
    if !range.contains(port) {
        return RangeReport {
            range: None,
            band: "none",
            detail: format!("outside the NodePort range {range} (--service-node-port-range)"),
        };
    }
    let base = i64::from(range.base());
    let offset = ports.band_offset() as i64;
    let held = format!("{} of its {} ports held", ports.used(), range.size());
    let (band, detail) = if offset == 0 {
        (
            "dynamic",
            format!("{range} is too small for a static band; {held}"),
        )
    } else if !ports.in_upper_band(port) {
        (
            "static",
            format!(
                "static band {base}-{} (for hand-picked ports; automatic picks reach it only when the dynamic band is full); {held}",
                base + offset - 1
            ),
        )
    } else {
        (
            "dynamic",
            format!(
                "dynamic band {}-{} (automatic picks search it first); {held}",
                base + offset,
                range.last()
            ),
        )
    };
    RangeReport {
        range: Some(range.to_string()),
        band,
        detail,
    }
}

/// The probe: a Service asking for `value` by hand, as an AdmissionReview.
fn probe_review(value: Claim) -> serde_json::Value {
    let spec = match value {
        Claim::Ip(ip) => json!({
            "type": "ClusterIP",
            "clusterIP": ip.to_string(),
            "clusterIPs": [ip.to_string()],
            "ipFamilies": [IpFamily::of(&ip).as_str()],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
        }),
        Claim::NodePort(port) => json!({
            "type": "NodePort",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": port}],
        }),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "svcplane-explain",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "name": PROBE_NAME,
            "namespace": PROBE_NAMESPACE,
            "operation": "CREATE",
            "dryRun": true,
            "object": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": PROBE_NAME, "namespace": PROBE_NAMESPACE},
                "spec": spec,
            },
        },
    })
}

/// The webhook's mutating answer to the probe (the state is a copy: the
/// reservation the review makes goes nowhere).
fn webhook_answer(mut state: AllocationState, value: Claim, what: &str) -> WebhookAnswer {
    let review = probe_review(value);
    let decided = serde_json::to_vec(&review)
        .map_err(|e| e.to_string())
        .and_then(|body| review::decode(&body).map_err(|e| e.to_string()));
    let request = match decided {
        Ok(Decoded::Service(request)) => request,
        // The probe is built here; failing to decode it is a bug in this file.
        Ok(Decoded::Passthrough { reason, .. }) | Err(reason) => {
            return WebhookAnswer {
                allowed: false,
                code: None,
                message: Some(format!(
                    "internal: the probe review was not reviewed: {reason}"
                )),
                warnings: Vec::new(),
                summary: "could not ask the webhook's review".to_owned(),
            };
        }
    };
    match review::mutate(&request, &mut state) {
        MutateDecision::Allow { warnings, .. } => WebhookAnswer {
            allowed: true,
            code: None,
            message: None,
            summary: format!(
                "free: a Service that asks for {what} is admitted{}",
                if warnings.is_empty() {
                    ""
                } else {
                    ", with a warning"
                }
            ),
            warnings,
        },
        MutateDecision::Deny(e) => WebhookAnswer {
            allowed: false,
            code: Some(e.code()),
            summary: format!(
                "a Service that asks for {what} is refused ({} {})",
                e.code(),
                e.reason()
            ),
            message: Some(e.to_string()),
            warnings: Vec::new(),
        },
    }
}

/// What the world could not read of the kinds that hold values.
pub(super) fn api_notes(world: &World) -> Vec<String> {
    let mut out = Vec::new();
    if world.ip_address_api == Availability::NotServed {
        out.push("this API server serves no IPAddress objects (networking.k8s.io/v1)".to_owned());
    }
    if world.claim_api == Availability::NotServed {
        out.push(
            "this API server serves no AllocationClaims: svcplane's webhook is not installed"
                .to_owned(),
        );
    }
    out
}

fn notes(world: &World) -> Vec<String> {
    let mut out = api_notes(world);
    out.push(
        "in-flight reservations live only inside a running webhook and are not shown".to_owned(),
    );
    out
}

/// Explains ClusterIP `ip`.
pub fn explain_ip(
    world: &World,
    config: &AllocatorConfig,
    ip: IpAddr,
) -> Result<ValueReport, String> {
    let state = state_of(world, config)?;
    let value = Claim::Ip(ip);
    let (holders, inert_claims) = holders(world, &state, value);
    let mut range = ip_range(&state, ip);
    // The rule that decides who may get it: the range's namespace selectors.
    if let Some(cidr) = &range.range {
        let scoped =
            svcplane_allocator::service_cidrs::cluster_ranges(&world.snapshot.service_cidr_views())
                .into_iter()
                .find(|r| r.cidr.to_string() == *cidr)
                .map(|r| r.scope)
                .filter(|s| *s != svcplane_allocator::range_scope::RangeScope::Everyone);
        if let Some(scope) = scoped {
            range.detail.push_str(&format!(
                "; the range serves only {} (svcplane.io/namespace-selector)",
                scope.describe()
            ));
        }
    }
    Ok(ValueReport {
        kind: "ClusterIP",
        value: ip.to_string(),
        range,
        webhook: webhook_answer(state, value, &format!("clusterIP {ip}")),
        holders,
        inert_claims,
        notes: notes(world),
    })
}

/// Explains NodePort `port`.
pub fn explain_node_port(
    world: &World,
    config: &AllocatorConfig,
    port: i32,
) -> Result<ValueReport, String> {
    let state = state_of(world, config)?;
    let value = Claim::NodePort(port);
    let (holders, inert_claims) = holders(world, &state, value);
    Ok(ValueReport {
        kind: "NodePort",
        value: port.to_string(),
        range: port_range(&state, port),
        webhook: webhook_answer(state, value, &format!("nodePort {port}")),
        holders,
        inert_claims,
        notes: notes(world),
    })
}
