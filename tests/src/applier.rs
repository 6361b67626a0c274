//! A small test applier: reads one Service's world from the API server, runs
//! svcplane's pure reconcilers over it (EndpointSlice with topology hints,
//! Endpoints, EndpointSlice mirroring) and carries the plans out (create with
//! generateName, update with the resourceVersion precondition, delete with a
//! uid precondition). It stands in for `svcplane run` until the runtime
//! exists.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client};
use svcplane_controller::core::endpoints::{self as eps, EndpointsWrite};
use svcplane_controller::core::endpointslice::{
    self, DEFAULT_MAX_ENDPOINTS_PER_SLICE, Inputs, Outcome, SliceRef, SliceWrite,
};
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use svcplane_controller::core::mirroring;
use svcplane_controller::core::topology::TopologyPolicy;
use svcplane_controller::core::trigger_time::TriggerTimeTracker;

/// Counts of the writes one sync made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Writes {
    /// EndpointSlice controller: slice creates, updates, deletes.
    pub creates: usize,
    pub updates: usize,
    pub deletes: usize,
    /// Endpoints controller: writes of the Endpoints object.
    pub endpoints: usize,
    /// Mirroring controller: slice writes.
    pub mirrored: usize,
}

impl Writes {
    pub fn total(&self) -> usize {
        self.creates + self.updates + self.deletes + self.endpoints + self.mirrored
    }
}

/// Runs the reconciler for Services in one namespace.
pub struct Applier {
    client: Client,
    namespace: String,
    tracker: TriggerTimeTracker,
    endpoints_tracker: TriggerTimeTracker,
    topology: TopologyPolicy,
    pub max_endpoints_per_slice: usize,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("namespace", &self.namespace)
            .field("max_endpoints_per_slice", &self.max_endpoints_per_slice)
            .finish_non_exhaustive()
    }
}

impl Applier {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            tracker: TriggerTimeTracker::default(),
            endpoints_tracker: TriggerTimeTracker::default(),
            topology: TopologyPolicy::from_nodes(std::iter::empty()),
            max_endpoints_per_slice: DEFAULT_MAX_ENDPOINTS_PER_SLICE,
        }
    }

    /// One sync of key `name` by every controller: read, reconcile, write.
    pub async fn sync(&mut self, name: &str) -> anyhow::Result<Writes> {
        let ns = self.namespace.clone();
        let services = Api::<Service>::namespaced(self.client.clone(), &ns);
        let pods_api = Api::<Pod>::namespaced(self.client.clone(), &ns);
        let endpoints_api = Api::<Endpoints>::namespaced(self.client.clone(), &ns);
        let service = services
            .get_opt(name)
            .await
            .with_context(|| format!("getting service {name}"))?;
        let endpoints = endpoints_api
            .get_opt(name)
            .await
            .with_context(|| format!("getting endpoints {name}"))?;
        let pods: Vec<Arc<Pod>> = pods_api
            .list(&ListParams::default())
            .await
            .context("listing pods")?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        let nodes: BTreeMap<String, Arc<Node>> = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .context("listing nodes")?
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), Arc::new(n)))
            .collect();
        let existing: Vec<Arc<EndpointSlice>> = list_slices(&self.client, &ns, name)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        self.topology.set_nodes(nodes.values().map(Arc::as_ref));
        let mut writes = Writes::default();

        // EndpointSlice controller.
        if let Some(service) = &service {
            let selected: Vec<Arc<Pod>> = endpointslice::desired::selected_pods(service, &pods)
                .into_iter()
                .map(|p| Arc::new(p.clone()))
                .collect();
            let trigger_time = self.tracker.compute(service, &selected);
            let outcome = endpointslice::reconcile_with_hints(
                &Inputs {
                    service,
                    pods: &pods,
                    nodes: &nodes,
                    existing: &existing,
                    trigger_time,
                    max_endpoints_per_slice: self.max_endpoints_per_slice,
                },
                &mut self.topology,
            );
            if let Outcome::Planned(plan) = outcome {
                for write in plan.writes() {
                    match &write {
                        SliceWrite::Create(_) => writes.creates += 1,
                        SliceWrite::Update(_) => writes.updates += 1,
                        SliceWrite::Delete(_) => writes.deletes += 1,
                    }
                    self.write_slice(write).await?;
                }
            }
        }

        // Endpoints controller.
        let trigger_time = service.as_ref().and_then(|s| {
            let selected: Vec<Arc<Pod>> = endpointslice::desired::selected_pods(s, &pods)
                .into_iter()
                .map(|p| Arc::new(p.clone()))
                .collect();
            self.endpoints_tracker.compute(s, &selected)
        });
        let outcome = eps::reconcile(&eps::Inputs {
            namespace: &ns,
            name,
            service: service.as_ref(),
            pods: &pods,
            existing: endpoints.as_ref(),
            trigger_time,
        });
        if let eps::Outcome::Planned(plan) = outcome {
            for write in plan.writes {
                writes.endpoints += 1;
                match write {
                    EndpointsWrite::Create(e) => {
                        endpoints_api
                            .create(&PostParams::default(), &e)
                            .await
                            .with_context(|| format!("creating endpoints {name}: {e:?}"))?;
                    }
                    EndpointsWrite::Update(e) => {
                        endpoints_api
                            .replace(name, &PostParams::default(), &e)
                            .await
                            .with_context(|| format!("updating endpoints {name}: {e:?}"))?;
                    }
                    EndpointsWrite::Delete(r) => {
                        let dp = DeleteParams {
                            preconditions: r.uid.map(|uid| Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..DeleteParams::default()
                        };
                        match endpoints_api.delete(name, &dp).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(e)) if e.code == 404 => {}
                            Err(e) => {
                                return Err(e)
                                    .with_context(|| format!("deleting endpoints {name}"));
                            }
                        }
                    }
                }
            }
        }

        // Mirroring controller (reads the Endpoints as they were at the start
        // of this sync; the next sync sees the Endpoints controller's write).
        let plan = mirroring::reconcile(&mirroring::Inputs {
            namespace: &ns,
            name,
            endpoints: endpoints.as_ref(),
            service: service.as_ref(),
            existing: &existing,
            max_endpoints_per_subset: mirroring::DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
        });
        for write in plan.writes() {
            writes.mirrored += 1;
            self.write_slice(write).await?;
        }
        Ok(writes)
    }

    async fn write_slice(&self, write: SliceWrite) -> anyhow::Result<()> {
        let slices = Api::<EndpointSlice>::namespaced(self.client.clone(), &self.namespace);
        match write {
            SliceWrite::Create(slice) => {
                slices
                    .create(&PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("creating a slice: {slice:?}"))?;
            }
            SliceWrite::Update(slice) => {
                let slice_name = slice.metadata.name.clone().unwrap_or_default();
                slices
                    .replace(&slice_name, &PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("updating slice {slice_name}: {slice:?}"))?;
            }
            SliceWrite::Delete(SliceRef { name, uid, .. }) => {
                let dp = DeleteParams {
                    preconditions: uid.map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match slices.delete(&name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e).with_context(|| format!("deleting slice {name}")),
                }
            }
        }
        Ok(())
    }

    /// Syncs until a pass writes nothing; returns the writes of every pass
    /// that wrote something.
    pub async fn converge(&mut self, name: &str) -> anyhow::Result<Vec<Writes>> {
        let mut passes = Vec::new();
        for _ in 0..10 {
            let w = self.sync(name).await?;
            if w.total() == 0 {
                return Ok(passes);
            }
            passes.push(w);
        }
        bail!("service {name} did not converge in 10 syncs: {passes:?}")
    }
}

/// The EndpointSlices stored for Service `name` (by the service-name label,
/// so mirrored slices too).
pub async fn list_slices(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<EndpointSlice>> {
    let api = Api::<EndpointSlice>::namespaced(client.clone(), namespace);
    let mut items = api
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={name}")))
        .await
        .with_context(|| format!("listing endpointslices of {name}"))?
        .items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(items)
}

/// The Endpoints object `name`, if stored.
pub async fn get_endpoints(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Endpoints>> {
    Api::<Endpoints>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("getting endpoints {name}"))
}
