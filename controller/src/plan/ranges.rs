//! `plan` for the controllers of Service ranges: the webhook's allocator (what it
//! would set on Services lacking values), the allocator's repair loop (what it would
//! report about the values in place) and the ServiceCIDR controller (its finalizer
//! and `Ready` condition on each ServiceCIDR).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::jiff::Timestamp;
use svcplane_allocator::{AllocationPlan, AllocatorEvent};

use super::output::{Action, Event, Object, PlanDocument, Verb};
use super::{ALLOCATOR_SEED, PlanOptions};
use crate::core::servicecidr::{self as core_cidr, Sent};
use crate::dump::snapshot::Snapshot;

/// The repair loop's name in `run`'s registry.
pub(super) const REPAIR: &str = "allocator-repair";

/// The allocator's plan over the Services as read: the cluster's ServiceCIDRs as
/// ranges when followed and present, else the flags'.
pub(super) fn allocations(snapshot: &Snapshot, options: &PlanOptions) -> AllocationPlan {
    let services: Vec<Service> = snapshot
        .services
        .values()
        .map(|s| Service::clone(s))
        .collect();
    let from_cluster = options
        .follow_service_cidrs
        .then(|| {
            options
                .allocator
                .with_service_cidrs(&snapshot.service_cidr_views())
        })
        .flatten();
    let ranges = from_cluster.as_ref().unwrap_or(&options.allocator);
    svcplane_allocator::plan_allocations(&services, ranges, ALLOCATOR_SEED)
}

/// The allocations the admission webhook would make: an `update` of every Service
/// still lacking ClusterIP(s) or nodePort(s), and a Warning for each it would refuse.
pub(super) fn emit_allocations(
    plan: &AllocationPlan,
    controller: &'static str,
    doc: &mut PlanDocument,
) {
    for update in &plan.updates {
        doc.actions.push(Action {
            controller,
            verb: Verb::Update,
            kind: "Service",
            subresource: None,
            namespace: update.namespace.clone(),
            name: Some(update.name.clone()),
            object: Some(Object::Service(Box::new(update.service.clone()))),
        });
    }
    doc.events.extend(plan.events.iter().map(event));
}

/// What the repair loop reports about the values in place (duplicates, out-of-range
/// and invalid ClusterIPs and nodePorts): events only, as `run`'s controller.
pub(super) fn emit_findings(
    plan: &AllocationPlan,
    _controller: &'static str,
    doc: &mut PlanDocument,
) {
    doc.events.extend(plan.findings.iter().map(event));
}

fn event(e: &AllocatorEvent) -> Event {
    Event {
        event_type: e.event_type.into(),
        reason: e.reason.clone(),
        object: e.object.clone(),
        kind: None,
        message: e.message.clone(),
    }
}

/// The ServiceCIDR controller's first sync of every ServiceCIDR, in name order, at
/// `now`: the finalizer patched in or out, the `Ready` condition applied. A
/// ServiceCIDR deleted less than the deletion grace before `now` gets nothing yet
/// (`run` syncs it again when the grace ends).
pub(super) fn plan_service_cidrs(
    snapshot: &Snapshot,
    now: Timestamp,
    controller: &'static str,
    doc: &mut PlanDocument,
) {
    let all: Vec<Arc<ServiceCIDR>> = snapshot.service_cidrs.values().cloned().collect();
    let ip_addresses: Vec<_> = snapshot.ip_addresses.values().cloned().collect();
    for (name, cidr) in &snapshot.service_cidrs {
        let plan = core_cidr::reconcile(&core_cidr::Inputs {
            cidr,
            all: &all,
            ip_addresses: &ip_addresses,
            now,
        });
        for write in &plan.writes {
            let (verb, subresource) = match write.sent() {
                Sent::StrategicMerge => (Verb::Patch, None),
                Sent::ApplyStatus => (Verb::Apply, Some("status")),
            };
            doc.actions.push(Action {
                controller,
                verb,
                kind: "ServiceCIDR",
                subresource,
                namespace: String::new(),
                name: Some(name.clone()),
                object: Some(Object::Patch(write.body(name, now))),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Controller;
    use crate::dump::input::read_source;
    use crate::dump::snapshot::SnapshotBuilder;
    use crate::plan::{PlanOptions, plan};

    const NOW: &str = "2026-11-29T08:00:00Z";

    fn snapshot(yaml: &str) -> Snapshot {
        let mut builder = SnapshotBuilder::default();
        for raw in read_source(std::path::Path::new("-"), &mut yaml.as_bytes()).unwrap() {
            builder.add(raw).unwrap();
        }
        builder.finish().0
    }

    fn options(controllers: &[&str]) -> PlanOptions {
        PlanOptions {
            controllers: controllers
                .iter()
                .map(|n| Controller::named(n).unwrap())
                .collect(),
            max_endpoints_per_slice: 100,
            allocator: svcplane_allocator::AllocatorConfig::from_flags(
                "10.96.0.0/12",
                "30000-32767",
            )
            .unwrap(),
            follow_service_cidrs: true,
            now: NOW.parse().unwrap(),
        }
    }

    fn cidr(name: &str, extra: &str) -> String {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: {name}{extra}}}\n\
             spec: {{cidrs: [10.100.0.0/24]}}\n---\n"
        )
    }

    const HOLDER: &str = "apiVersion: networking.k8s.io/v1\nkind: IPAddress\n\
        metadata: {name: 10.100.0.7, labels: {ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io, ipaddress.kubernetes.io/ip-family: IPv4}}\n\
        spec: {parentRef: {group: '', resource: services, namespace: a, name: b}}\n---\n";

    /// (verb, subresource, name) of each write.
    fn writes(doc: &PlanDocument) -> Vec<(String, Option<&str>, String)> {
        doc.actions
            .iter()
            .map(|a| {
                (
                    format!("{:?}", a.verb),
                    a.subresource,
                    a.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// AL-6.2: a new ServiceCIDR gets the finalizer and `Ready=True` stamped with `now`.
    #[test]
    fn a_new_service_cidr_gets_its_finalizer_and_ready() {
        let doc = plan(&snapshot(&cidr("c", "")), &options(&["servicecidr"]));
        assert_eq!(
            writes(&doc),
            [
                ("Patch".into(), None, "c".into()),
                ("Apply".into(), Some("status"), "c".into())
            ]
        );
        let Some(Object::Patch(status)) = &doc.actions[1].object else {
            panic!("{doc:?}")
        };
        assert_eq!(status["status"]["conditions"][0]["lastTransitionTime"], NOW);
        assert_eq!(status["status"]["conditions"][0]["status"], "True");
        assert_eq!(doc.actions[1].namespace, "", "cluster-scoped");
    }

    /// AL-6.2: a deleted ServiceCIDR an IPAddress still uses stays, `Ready=False`
    /// (Terminating); once empty and past the grace its finalizer goes; within the
    /// grace nothing is written yet.
    #[test]
    fn a_deleted_service_cidr_waits_for_its_addresses_and_the_grace() {
        let deleted = ", deletionTimestamp: '2026-11-29T07:00:00Z', \
                       finalizers: [networking.k8s.io/service-cidr-finalizer]";
        let held = plan(
            &snapshot(&format!("{}{HOLDER}", cidr("c", deleted))),
            &options(&["servicecidr"]),
        );
        assert_eq!(
            writes(&held),
            [("Apply".into(), Some("status"), "c".into())]
        );
        let Some(Object::Patch(status)) = &held.actions[0].object else {
            panic!("{held:?}")
        };
        assert_eq!(status["status"]["conditions"][0]["reason"], "Terminating");
        let empty = plan(&snapshot(&cidr("c", deleted)), &options(&["servicecidr"]));
        assert_eq!(writes(&empty), [("Patch".into(), None, "c".into())]);
        let Some(Object::Patch(body)) = &empty.actions[0].object else {
            panic!("{empty:?}")
        };
        assert!(body["metadata"]["$deleteFromPrimitiveList/finalizers"].is_array());
        let just_now = ", deletionTimestamp: '2026-11-29T07:59:55Z', \
                        finalizers: [networking.k8s.io/service-cidr-finalizer]";
        let waiting = plan(&snapshot(&cidr("c", just_now)), &options(&["servicecidr"]));
        assert!(waiting.actions.is_empty(), "{waiting:?}");
    }

    /// AL-12: the repair loop's findings belong to `allocator-repair`, the webhook's
    /// updates and refusals to `allocator`.
    #[test]
    fn findings_are_the_repair_loops_and_updates_the_allocators() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {namespace: a, name: one}\n\
                    spec: {clusterIP: 10.96.0.5, clusterIPs: [10.96.0.5], ports: [{port: 80}]}\n---\n\
                    apiVersion: v1\nkind: Service\nmetadata: {namespace: a, name: two}\n\
                    spec: {clusterIP: 10.96.0.5, clusterIPs: [10.96.0.5], ports: [{port: 80}]}\n---\n\
                    apiVersion: v1\nkind: Service\nmetadata: {namespace: a, name: three}\n\
                    spec: {ports: [{port: 80}]}\n";
        let s = snapshot(yaml);
        let reasons = |doc: &PlanDocument| -> Vec<String> {
            doc.events.iter().map(|e| e.reason.clone()).collect()
        };
        let repair = plan(&s, &options(&["allocator-repair"]));
        assert_eq!(reasons(&repair), ["ClusterIPAlreadyAllocated"]);
        assert!(repair.actions.is_empty());
        let allocator = plan(&s, &options(&["allocator"]));
        assert!(reasons(&allocator).is_empty(), "{allocator:?}");
        assert_eq!(allocator.actions.len(), 1);
        assert_eq!(allocator.actions[0].name.as_deref(), Some("three"));
    }
}
