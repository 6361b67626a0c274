//! Reading a live cluster into a [`World`]: the same kinds a dump holds,
//! with `list` only — `explain` never writes, so read-only RBAC is enough
//! (`get, list` on services, pods, nodes, endpointslices, endpoints,
//! ipaddresses and allocationclaims; `list` on configmaps shows moves of
//! `svcplane migrate` in progress in `explain range`).
//!
//! `explain service|pod` reads one namespace (and every Node, for zones and
//! CPU); `explain ip|nodeport` reads every Service, IPAddress and
//! AllocationClaim. A kind the API server does not serve (404: IPAddress
//! before 1.33, AllocationClaim without svcplane's CRD) is recorded as
//! [`Availability::NotServed`] rather than failing.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use svcplane_webhook::claim::AllocationClaim;
use tracing::debug;

use super::ExplainError;
use super::world::{Availability, Source, World};
use crate::core::migrated;
use crate::dump::snapshot::Key;

/// What to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Services, Pods, EndpointSlices and Endpoints of one namespace, and
    /// every Node.
    Namespace(String),
    /// Every Service, IPAddress, AllocationClaim and ServiceCIDR.
    Allocations,
}

/// Lists every object of `api`; `None` when the kind is not served (404).
async fn list<K>(api: Api<K>, what: &str) -> Result<Option<Vec<K>>, ExplainError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            debug!(kind = what, count = list.items.len(), "listed");
            Ok(Some(list.items))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(ExplainError::Api {
            what: format!("listing {what}"),
            message: e.to_string(),
        }),
    }
}

/// Lists a kind that must be served.
async fn list_required<K>(api: Api<K>, what: &str) -> Result<Vec<K>, ExplainError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    list(api, what).await?.ok_or_else(|| ExplainError::Api {
        what: format!("listing {what}"),
        message: "the API server does not serve this kind (404)".to_owned(),
    })
}

fn keyed<K: Resource>(items: Vec<K>) -> BTreeMap<Key, Arc<K>> {
    items
        .into_iter()
        .map(|o| {
            let meta = o.meta();
            let key = Key {
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
            };
            (key, Arc::new(o))
        })
        .collect()
}

fn named<K: Resource>(items: Vec<K>) -> BTreeMap<String, K> {
    items
        .into_iter()
        .map(|o| (o.meta().name.clone().unwrap_or_default(), o))
        .collect()
}

/// Adds every AllocationClaim to `world`, when they can be read (a user may lack
/// the permission, and an API server the CRD: the answer then just says less).
pub async fn add_claims(client: Client, world: &mut World) {
    if let Ok(Some(claims)) = list(Api::<AllocationClaim>::all(client), "allocationclaims").await {
        world.claims = named(claims);
    }
}

/// Adds the moves `migrate --apply` has in progress (its journal ConfigMaps, by label)
/// to `world`; a user who may not list ConfigMaps gets a note instead.
async fn add_moves(client: Client, world: &mut World) {
    let params = ListParams::default().labels(&format!("{}=true", migrated::JOURNAL_LABEL));
    match Api::<ConfigMap>::all(client).list(&params).await {
        Ok(list) => {
            world.moves = list
                .items
                .iter()
                .filter_map(migrated::move_in_progress)
                .collect();
        }
        Err(e) => {
            world.moves_unread = Some(format!(
                "moves of svcplane migrate not shown: listing its journal ConfigMaps failed ({e})"
            ));
        }
    }
}

/// Adds the Endpoints object and the EndpointSlices of every Service without a
/// selector to `world` (`migrate` must not recreate a Service whose endpoints are kept
/// by hand, which its delete would take along). One GET and one labelled list per such
/// Service, a few at a time: most Services have a selector.
pub async fn add_selectorless_endpoints(
    client: Client,
    world: &mut World,
) -> Result<(), ExplainError> {
    use futures::{StreamExt, TryStreamExt};

    use crate::core::keys::LABEL_SERVICE_NAME;
    let wanted: Vec<Key> = world
        .snapshot
        .services
        .iter()
        .filter(|(_, svc)| migrated::endpoints_kept_by_others(svc))
        .map(|(k, _)| k.clone())
        .collect();
    let read = |key: Key| {
        let client = client.clone();
        async move {
            let failed = |what: &str, e: kube::Error| ExplainError::Api {
                what: format!(
                    "reading the {what} of Service {}/{}",
                    key.namespace, key.name
                ),
                message: e.to_string(),
            };
            let endpoints = Api::<Endpoints>::namespaced(client.clone(), &key.namespace)
                .get_opt(&key.name)
                .await
                .map_err(|e| failed("Endpoints", e))?;
            let params =
                ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={}", key.name));
            let slices = Api::<EndpointSlice>::namespaced(client, &key.namespace)
                .list(&params)
                .await
                .map_err(|e| failed("EndpointSlices", e))?
                .items;
            Ok::<_, ExplainError>((endpoints, slices))
        }
    };
    let found: Vec<(Option<Endpoints>, Vec<EndpointSlice>)> = futures::stream::iter(wanted)
        .map(read)
        .buffer_unordered(8)
        .try_collect()
        .await?;
    for (endpoints, slices) in found {
        world
            .snapshot
            .endpoints
            .extend(keyed(endpoints.into_iter().collect()));
        world.snapshot.endpoint_slices.extend(keyed(slices));
    }
    Ok(())
}

/// Reads `scope` from the cluster behind `client`.
pub async fn load(client: Client, scope: &Scope) -> Result<World, ExplainError> {
    let mut world = World::empty(Source::Cluster);
    match scope {
        Scope::Namespace(ns) => {
            let (services, pods, slices, endpoints, nodes) = futures::try_join!(
                list_required(Api::<Service>::namespaced(client.clone(), ns), "services"),
                list_required(Api::<Pod>::namespaced(client.clone(), ns), "pods"),
                list_required(
                    Api::<EndpointSlice>::namespaced(client.clone(), ns),
                    "endpointslices"
                ),
                list_required(
                    Api::<Endpoints>::namespaced(client.clone(), ns),
                    "endpoints"
                ),
                list_required(Api::<Node>::all(client.clone()), "nodes"),
            )?;
            world.snapshot.services = keyed(services);
            world.snapshot.pods = keyed(pods);
            world.snapshot.endpoint_slices = keyed(slices);
            world.snapshot.endpoints = keyed(endpoints);
            world.snapshot.nodes = nodes
                .into_iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), Arc::new(n)))
                .collect();
        }
        Scope::Allocations => {
            let (services, addresses, claims, cidrs) = futures::try_join!(
                list_required(Api::<Service>::all(client.clone()), "services"),
                list(Api::<IPAddress>::all(client.clone()), "ipaddresses"),
                list(
                    Api::<AllocationClaim>::all(client.clone()),
                    "allocationclaims"
                ),
                list(Api::<ServiceCIDR>::all(client.clone()), "servicecidrs"),
            )?;
            world.snapshot.services = keyed(services);
            // An API server without ServiceCIDRs (before 1.33): the flags' ranges.
            world.snapshot.service_cidrs = named(cidrs.unwrap_or_default())
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect();
            match addresses {
                Some(a) => {
                    world.snapshot.ip_addresses = named(a)
                        .into_iter()
                        .map(|(k, v)| (k, Arc::new(v)))
                        .collect();
                }
                None => world.ip_address_api = Availability::NotServed,
            }
            match claims {
                Some(c) => world.claims = named(c),
                None => world.claim_api = Availability::NotServed,
            }
            add_moves(client, &mut world).await;
        }
    }
    Ok(world)
}
