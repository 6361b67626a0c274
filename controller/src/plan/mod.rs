//! `svcplane plan`: read cluster objects, run the controllers' pure cores over
//! them, and print the writes and events they would make.
//!
//! - [`crate::dump`]: the dump read into a typed, sorted snapshot (shared with
//!   `explain`);
//! - `output`: the `{actions, events}` document;
//! - `ranges`: the allocator, its repair loop and the ServiceCIDR controller;
//! - this module: run each selected controller over the snapshot.
//!
//! Nothing is written to stdout unless the whole input was valid and the
//! plan was built. After the document, a summary (writes by controller, verb and
//! kind; events by type) goes to stderr; `--summary` prints a table of the writes
//! and events to stdout instead of the objects. A closed stdout (`plan | head`)
//! is not an error.

pub mod output;
mod ranges;

use std::io::{Read, Write};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use tracing::debug;

use crate::cli::{Controller, PlanArgs};
use crate::core::endpointslice::{self, Inputs, Outcome, SliceWrite};

use crate::core::selector::selector_matches_pod;
use crate::core::topology::TopologyPolicy;
use crate::core::trigger_time::TriggerTimeTracker;

use svcplane_allocator::{AllocatorConfig, ConfigError};

use self::output::{Action, EncodeError, Event, Object, PlanDocument, Verb};
use crate::dump::input::{self, InputError};
use crate::dump::snapshot::{self, Snapshot, SnapshotBuilder};

/// Why `plan` failed. Every variant exits 1.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Bad input; the message is the `FILE: document N (...): reason` line.
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("cannot write output: {0}")]
    Write(#[source] std::io::Error),
    /// A bad allocator flag (normally caught by clap first).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl PlanError {
    /// The process exit code for this error: 2 for bad flags, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            PlanError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// What to plan, independent of the CLI.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub controllers: Vec<Controller>,
    pub max_endpoints_per_slice: usize,
    /// `--service-cluster-ip-range` and `--service-node-port-range`.
    pub allocator: AllocatorConfig,
    /// Take the ClusterIP ranges from the input's ServiceCIDR objects when it has any
    /// (`--service-ranges-from=cluster`, the default).
    pub follow_service_cidrs: bool,
    /// The time the plan is made at: a ServiceCIDR's `Ready` condition carries it,
    /// and one deleted less than the deletion grace before it keeps its finalizer.
    pub now: Timestamp,
}

/// Seed of the allocator's random picks in `plan`: fixed, so a plan is
/// reproducible (a live allocator seeds from entropy).
pub const ALLOCATOR_SEED: u64 = 0x5eed;

impl TryFrom<&PlanArgs> for PlanOptions {
    type Error = PlanError;

    fn try_from(args: &PlanArgs) -> Result<Self, PlanError> {
        Ok(PlanOptions {
            controllers: args.controllers.clone(),
            max_endpoints_per_slice: usize::from(args.max_endpoints_per_slice),
            allocator: args.ranges.config()?,
            follow_service_cidrs: args.ranges.follow_cluster(),
            now: args.now.unwrap_or_else(Timestamp::now),
        })
    }
}

/// Runs `svcplane plan`: reads every `-f` source (`-` from `stdin`), prints
/// warnings to `stderr` (one line each) and the rendered plan to `stdout`.
pub fn run(
    args: &PlanArgs,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), PlanError> {
    let mut builder = SnapshotBuilder::default();
    for path in &args.files {
        for raw in input::read_source(path, stdin)? {
            builder.add(raw)?;
        }
    }
    let (snapshot, warnings) = builder.finish();
    for w in &warnings {
        // Warnings are best effort: a closed stderr must not fail the plan.
        let _ = writeln!(stderr, "{w}");
    }
    let options = PlanOptions::try_from(args)?;
    let doc = plan(&snapshot, &options);
    let text = if args.summary {
        doc.render_table()
    } else {
        doc.render(args.output)?
    };
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // The reader went away (`svcplane plan ... | head`): what it wanted it got.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(PlanError::Write(e)),
        Ok(()) => {}
    }
    if !args.summary {
        // After the document, so it is the last thing on a terminal.
        let _ = stderr.write_all(doc.summary().as_bytes());
    }
    Ok(())
}

/// Runs the selected controllers over `snapshot`. Output order: controller
/// (in [`Controller::all`] order), then namespace and Service name, then the
/// order the controller issues its writes.
///
/// When the allocator runs, the other controllers see the Services as the
/// allocator leaves them, as they would once the webhook had admitted them.
pub fn plan(snapshot: &Snapshot, options: &PlanOptions) -> PlanDocument {
    let mut controllers = options.controllers.clone();
    controllers.sort_unstable();
    controllers.dedup();
    let runs = |name: &str| controllers.iter().any(|c| c.name() == name);
    // The allocator and its repair loop plan against the Services as read, once; the
    // other controllers then see the Services with the allocator's updates applied.
    let allocation = (runs(Controller::ALLOCATOR) || runs(ranges::REPAIR))
        .then(|| ranges::allocations(snapshot, options));
    let allocated;
    let mut view = snapshot;
    if let Some(plan) = allocation.as_ref().filter(|_| runs(Controller::ALLOCATOR)) {
        let mut with_allocations = snapshot.clone();
        for update in &plan.updates {
            let key = snapshot::Key {
                namespace: update.namespace.clone(),
                name: update.name.clone(),
            };
            with_allocations
                .services
                .insert(key, Arc::new(update.service.clone()));
        }
        allocated = with_allocations;
        view = &allocated;
    }
    let planning = Planning {
        view,
        options,
        allocation: allocation.as_ref(),
    };
    let mut doc = PlanDocument::default();
    if runs("endpointslice") || runs("endpoints") {
        pod_ip_events(view, &mut doc);
    }
    for controller in controllers {
        match planner(controller.name()) {
            Some(planner) => planner(&planning, controller.name(), &mut doc),
            // `every_controller_has_a_planner` keeps this from happening.
            None => tracing::warn!(controller = controller.name(), "no planner, skipped"),
        }
    }
    doc
}

/// What every planner reads.
struct Planning<'a> {
    /// The cluster, with the allocator's updates applied when it runs.
    view: &'a Snapshot,
    options: &'a PlanOptions,
    /// The allocator's plan over the Services as read, when it or its repair runs.
    allocation: Option<&'a svcplane_allocator::AllocationPlan>,
}

/// Plans one controller (named by the second argument) into the document.
type Planner = fn(&Planning<'_>, &'static str, &mut PlanDocument);

/// The planner of each controller `plan` can run ([`Controller::all`]): each of `run`'s
/// registered controllers and the webhook's allocator.
fn planner(name: &str) -> Option<Planner> {
    Some(match name {
        "endpointslice" => |p, c, doc| plan_endpoint_slices(p.view, p.options, c, doc),
        "endpoints" => |p, c, doc| plan_endpoints(p.view, c, doc),
        "endpointslicemirroring" => |p, c, doc| plan_mirroring(p.view, c, doc),
        ranges::REPAIR => |p, c, doc| {
            if let Some(plan) = p.allocation {
                ranges::emit_findings(plan, c, doc);
            }
        },
        "servicecidr" => |p, c, doc| ranges::plan_service_cidrs(p.view, p.options.now, c, doc),
        Controller::ALLOCATOR => |p, c, doc| {
            if let Some(plan) = p.allocation {
                ranges::emit_allocations(plan, c, doc);
            }
        },
        _ => return None,
    })
}

/// The Warnings `svcplane run` records on Pods with unparseable addresses when it
/// first sees them (the same core rule).
fn pod_ip_events(snapshot: &Snapshot, doc: &mut PlanDocument) {
    for (key, pod) in &snapshot.pods {
        if let Some(e) = crate::core::pod::invalid_pod_ip_event(pod.as_ref()) {
            doc.events.push(Event {
                event_type: e.event_type,
                reason: e.reason.to_owned(),
                object: key.to_string(),
                kind: Some("Pod"),
                message: e.message,
            });
        }
    }
}

fn selected_pods(service: &Service, pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    pods.iter()
        .filter(|p| selector_matches_pod(selector, p.as_ref()))
        .cloned()
        .collect()
}

fn plan_endpoint_slices(
    snapshot: &Snapshot,
    options: &PlanOptions,
    controller: &'static str,
    doc: &mut PlanDocument,
) {
    // Offline, every sync is a first sync: the tracker yields the Service's
    // creationTimestamp.
    let mut trigger_times = TriggerTimeTracker::default();
    // Topology hints from the snapshot's Nodes, with a fresh cache: no
    // Service has populated hints yet.
    let mut topology = TopologyPolicy::from_nodes(snapshot.nodes.values().map(Arc::as_ref));
    for (key, service) in &snapshot.services {
        let pods = snapshot.pods_in(&key.namespace);
        let existing = snapshot.endpoint_slices_in(&key.namespace);
        let trigger_time = trigger_times.compute(service, &selected_pods(service, &pods));
        let inputs = Inputs {
            service,
            pods: &pods,
            nodes: &snapshot.nodes,
            existing: &existing,
            trigger_time,
            max_endpoints_per_slice: options.max_endpoints_per_slice,
        };
        let plan = match endpointslice::reconcile_with_hints(&inputs, &mut topology) {
            Outcome::Skipped(reason) => {
                debug!(service = %key, ?reason, "skipped");
                continue;
            }
            Outcome::Planned(plan) => plan,
        };
        debug!(service = %key, writes = plan.write_count(), error = ?plan.error, "planned");
        for write in plan.writes() {
            let (verb, namespace, name, object) = match write {
                SliceWrite::Create(slice) => (
                    Verb::Create,
                    slice.metadata.namespace.clone(),
                    slice.metadata.name.clone(),
                    Some(slice),
                ),
                SliceWrite::Update(slice) => (
                    Verb::Update,
                    slice.metadata.namespace.clone(),
                    slice.metadata.name.clone(),
                    Some(slice),
                ),
                SliceWrite::Delete(r) => (Verb::Delete, Some(r.namespace), Some(r.name), None),
            };
            doc.actions.push(Action {
                controller,
                verb,
                kind: "EndpointSlice",
                subresource: None,
                namespace: namespace.unwrap_or_else(|| key.namespace.clone()),
                name,
                object: object.map(|s| Object::EndpointSlice(Box::new(s))),
            });
        }
        doc.events.extend(plan.events.into_iter().map(|e| Event {
            event_type: e.event_type,
            reason: e.reason.to_owned(),
            object: key.to_string(),
            kind: None,
            message: e.message,
        }));
    }
}

/// Keys `namespace/name` of a map, as [`snapshot::Key`]s.
fn keys_of<T>(map: &std::collections::BTreeMap<snapshot::Key, Arc<T>>) -> Vec<snapshot::Key> {
    map.keys().cloned().collect()
}

fn planned_events(
    key: &snapshot::Key,
    events: Vec<crate::core::event::PlannedEvent>,
    doc: &mut PlanDocument,
) {
    doc.events.extend(events.into_iter().map(|e| Event {
        event_type: e.event_type,
        reason: e.reason.to_owned(),
        object: key.to_string(),
        kind: None,
        message: e.message,
    }));
}

/// The Endpoints controller's first sync: every Service, plus every
/// Endpoints object but leader-election records (the start-up scan that
/// deletes leftovers of deleted Services), in key order.
fn plan_endpoints(snapshot: &Snapshot, controller: &'static str, doc: &mut PlanDocument) {
    use crate::core::endpoints::{self as eps, EndpointsWrite};
    let mut keys: std::collections::BTreeSet<snapshot::Key> =
        keys_of(&snapshot.services).into_iter().collect();
    keys.extend(
        snapshot
            .endpoints
            .iter()
            .filter(|(_, e)| !eps::triggers::is_leader_record(e))
            .map(|(k, _)| k.clone()),
    );
    let mut trigger_times = TriggerTimeTracker::default();
    for key in keys {
        let service = snapshot.services.get(&key).map(Arc::as_ref);
        let pods = snapshot.pods_in(&key.namespace);
        let trigger_time = service.and_then(|s| trigger_times.compute(s, &selected_pods(s, &pods)));
        let inputs = eps::Inputs {
            namespace: &key.namespace,
            name: &key.name,
            service,
            pods: &pods,
            existing: snapshot.endpoints.get(&key).map(Arc::as_ref),
            trigger_time,
        };
        let plan = match eps::reconcile(&inputs) {
            eps::Outcome::Skipped(reason) => {
                debug!(endpoints = %key, ?reason, "skipped");
                continue;
            }
            eps::Outcome::Planned(plan) => plan,
        };
        debug!(endpoints = %key, writes = plan.writes.len(), truncated = plan.truncated, "planned");
        for write in plan.writes {
            let (verb, object) = match write {
                EndpointsWrite::Create(e) => (Verb::Create, Some(e)),
                EndpointsWrite::Update(e) => (Verb::Update, Some(e)),
                EndpointsWrite::Delete(_) => (Verb::Delete, None),
            };
            doc.actions.push(Action {
                controller,
                verb,
                kind: "Endpoints",
                subresource: None,
                namespace: key.namespace.clone(),
                name: Some(key.name.clone()),
                object: object.map(|e| Object::Endpoints(Box::new(e))),
            });
        }
        planned_events(&key, plan.events, doc);
    }
}

/// The mirroring controller's first sync: every key with an Endpoints
/// object, a Service or a mirrored slice, in key order.
fn plan_mirroring(snapshot: &Snapshot, controller: &'static str, doc: &mut PlanDocument) {
    use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
    use crate::core::mirroring;
    let mut keys: std::collections::BTreeSet<snapshot::Key> =
        keys_of(&snapshot.endpoints).into_iter().collect();
    keys.extend(keys_of(&snapshot.services));
    keys.extend(snapshot.endpoint_slices.iter().filter_map(|(k, s)| {
        let labels = s.metadata.labels.as_ref()?;
        (labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(mirroring::CONTROLLER_NAME)).then(
            || snapshot::Key {
                namespace: k.namespace.clone(),
                name: labels.get(LABEL_SERVICE_NAME).cloned().unwrap_or_default(),
            },
        )
    }));
    for key in keys {
        let existing = snapshot.endpoint_slices_in(&key.namespace);
        let inputs = mirroring::Inputs {
            namespace: &key.namespace,
            name: &key.name,
            endpoints: snapshot.endpoints.get(&key).map(Arc::as_ref),
            service: snapshot.services.get(&key).map(Arc::as_ref),
            existing: &existing,
            max_endpoints_per_subset: mirroring::DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
        };
        let plan = mirroring::reconcile(&inputs);
        debug!(endpoints = %key, writes = plan.write_count(), not_mirrored = ?plan.not_mirrored, "planned");
        for write in plan.writes() {
            let (verb, name, object) = match write {
                SliceWrite::Create(slice) => {
                    (Verb::Create, slice.metadata.name.clone(), Some(slice))
                }
                SliceWrite::Update(slice) => {
                    (Verb::Update, slice.metadata.name.clone(), Some(slice))
                }
                SliceWrite::Delete(r) => (Verb::Delete, Some(r.name), None),
            };
            doc.actions.push(Action {
                controller,
                verb,
                kind: "EndpointSlice",
                subresource: None,
                namespace: key.namespace.clone(),
                name,
                object: object.map(|s| Object::EndpointSlice(Box::new(s))),
            });
        }
        planned_events(&key, plan.events, doc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::registry;

    /// `plan` covers every controller `run` has: each registered controller, in the
    /// registry's order, then the webhook's allocator, and a planner for each.
    #[test]
    fn every_controller_has_a_planner() {
        let names: Vec<&str> = Controller::all().iter().map(|c| c.name()).collect();
        let mut want: Vec<&str> = registry::names().collect();
        want.push(Controller::ALLOCATOR);
        assert_eq!(names, want);
        for c in Controller::all() {
            assert!(planner(c.name()).is_some(), "no planner for {}", c.name());
        }
    }
}
