//! The cluster's objects at the end of a run, and whether the endpoints in them are
//! right.
//!
//! [`check`] is deliberately independent of svcplane's planner, so it judges both
//! controllers the same way: for every Service with a selector, each of its Pods that
//! has an IP and is not terminating is in exactly one of its EndpointSlices with its
//! readiness, and in its Endpoints object (`addresses` when ready,
//! `notReadyAddresses` otherwise); no slice or Endpoints object names a Pod that is gone
//! or no longer selected; a terminating Pod is never shown ready, and never in
//! Endpoints. An Endpoints object over 1000 addresses is truncated by both controllers,
//! so then it must hold exactly 1000 of the right ones.
//!
//! The same objects as a [`Snapshot`] let the pure planner judge too (re-plan writes
//! and the write floor, [`crate::sim::floor`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use svcplane_controller::core::endpoints::MAX_CAPACITY;
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_controller::dump::snapshot::{Key, Snapshot};

fn key_of(meta: &ObjectMeta) -> Key {
    Key {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

async fn list<K>(client: &Client) -> anyhow::Result<BTreeMap<Key, Arc<K>>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let items = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::plural(&())))?
        .items;
    Ok(items
        .into_iter()
        .filter(|o| !super::observer::excluded(o.meta()))
        .map(|o| (key_of(o.meta()), Arc::new(o)))
        .collect())
}

/// The EndpointSlices and Endpoints stored now (the start of a write floor).
pub async fn endpoint_state(client: &Client) -> anyhow::Result<Snapshot> {
    Ok(Snapshot {
        endpoint_slices: list::<EndpointSlice>(client).await?,
        endpoints: list::<Endpoints>(client).await?,
        ..Snapshot::default()
    })
}

/// Everything the endpoint controllers read and write, stored now.
pub async fn snapshot(client: &Client) -> anyhow::Result<Snapshot> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?
        .items;
    let mut s = endpoint_state(client).await?;
    s.services = list::<Service>(client).await?;
    s.pods = list::<Pod>(client).await?;
    s.nodes = nodes
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), Arc::new(n)))
        .collect();
    Ok(s)
}

/// What a Pod should look like in its Services' endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Ready,
    NotReady,
    /// Terminating: in slices only, never ready.
    Terminating,
}

fn expectation(pod: &Pod) -> Option<Expect> {
    let status = pod.status.as_ref()?;
    status.pod_ip.as_deref().filter(|ip| !ip.is_empty())?;
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(Expect::Terminating);
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    Some(if ready {
        Expect::Ready
    } else {
        Expect::NotReady
    })
}

fn selects(service: &Service, pod: &Pod) -> bool {
    let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// What is wrong with the endpoints of `snap` (empty: PASS), at most `limit` findings
/// plus a count of the rest.
pub fn check(snap: &Snapshot, limit: usize) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, service) in &snap.services {
        if service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_none()
        {
            continue;
        }
        let want: BTreeMap<String, Expect> = snap
            .pods_in(&key.namespace)
            .iter()
            .filter(|p| selects(service, p))
            .filter_map(|p| Some((p.metadata.name.clone()?, expectation(p)?)))
            .collect();
        check_slices(snap, key, &want, &mut problems);
        check_endpoints(
            snap.endpoints.get(key).map(Arc::as_ref),
            key,
            &want,
            &mut problems,
        );
    }
    let total = problems.len();
    if total > limit {
        problems.truncate(limit);
        problems.push(format!("... and {} more", total - limit));
    }
    problems
}

fn check_slices(
    snap: &Snapshot,
    service: &Key,
    want: &BTreeMap<String, Expect>,
    problems: &mut Vec<String>,
) {
    let mut shown: BTreeMap<String, bool> = BTreeMap::new();
    let slices = snap.endpoint_slices.values().filter(|s| {
        s.metadata.namespace.as_deref() == Some(&service.namespace)
            && s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SERVICE_NAME))
                == Some(&service.name)
    });
    for slice in slices {
        for e in slice.endpoints() {
            let Some(pod) = e.target_ref.as_ref().and_then(|r| r.name.clone()) else {
                continue;
            };
            let ready = e.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            // One entry per address family and port set; this bench has one of each.
            if shown.insert(pod.clone(), ready).is_some() {
                problems.push(format!("{service}: Pod {pod} is in two slices"));
            }
        }
    }
    for (pod, expect) in want {
        match (expect, shown.get(pod)) {
            (Expect::Ready, Some(true)) | (Expect::NotReady, Some(false)) => {}
            (Expect::Terminating, None | Some(false)) => {}
            (Expect::Terminating, Some(true)) => problems.push(format!(
                "{service}: terminating Pod {pod} shown ready in a slice"
            )),
            (_, None) => problems.push(format!("{service}: Pod {pod} missing from slices")),
            (_, Some(r)) => problems.push(format!(
                "{service}: Pod {pod} in a slice with ready={r}, wanted {expect:?}"
            )),
        }
    }
    for pod in shown.keys().filter(|p| !want.contains_key(*p)) {
        problems.push(format!("{service}: slice holds Pod {pod}, which is gone"));
    }
}

fn check_endpoints(
    endpoints: Option<&Endpoints>,
    service: &Key,
    want: &BTreeMap<String, Expect>,
    problems: &mut Vec<String>,
) {
    let Some(endpoints) = endpoints else {
        problems.push(format!("{service}: no Endpoints object"));
        return;
    };
    let mut ready = BTreeSet::new();
    let mut not_ready = BTreeSet::new();
    for subset in endpoints.subsets.iter().flatten() {
        for (list, into) in [
            (&subset.addresses, &mut ready),
            (&subset.not_ready_addresses, &mut not_ready),
        ] {
            for a in list.iter().flatten() {
                if let Some(n) = a.target_ref.as_ref().and_then(|r| r.name.clone()) {
                    into.insert(n);
                }
            }
        }
    }
    let of = |e: Expect| -> BTreeSet<String> {
        want.iter()
            .filter(|(_, x)| **x == e)
            .map(|(p, _)| p.clone())
            .collect()
    };
    let (want_ready, want_not_ready) = (of(Expect::Ready), of(Expect::NotReady));
    if want_ready.len() + want_not_ready.len() <= MAX_CAPACITY {
        if ready != want_ready {
            problems.push(format!(
                "{service}: Endpoints addresses differ: {} missing, {} extra",
                want_ready.difference(&ready).count(),
                ready.difference(&want_ready).count()
            ));
        }
        if not_ready != want_not_ready {
            problems.push(format!(
                "{service}: Endpoints notReadyAddresses differ: {} missing, {} extra",
                want_not_ready.difference(&not_ready).count(),
                not_ready.difference(&want_not_ready).count()
            ));
        }
    } else {
        let wrong =
            ready.difference(&want_ready).count() + not_ready.difference(&want_not_ready).count();
        if ready.len() + not_ready.len() != MAX_CAPACITY || wrong > 0 {
            problems.push(format!(
                "{service}: over-capacity Endpoints hold {} addresses, {wrong} of them wrong",
                ready.len() + not_ready.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj<T: DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn k(name: &str) -> Key {
        Key {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn pod(name: &str, ready: bool, terminating: bool) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"namespace": "ns", "name": name, "labels": {"app": "web"}},
            "status": {"podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        });
        if terminating {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        obj(v)
    }

    fn slice(members: &[(&str, bool)]) -> Arc<EndpointSlice> {
        let endpoints: Vec<_> = members
            .iter()
            .map(|(p, r)| {
                json!({"addresses": ["10.0.0.1"], "conditions": {"ready": r},
                                 "targetRef": {"kind": "Pod", "namespace": "ns", "name": p}})
            })
            .collect();
        obj(json!({
            "metadata": {"namespace": "ns", "name": "web-x", "labels": {LABEL_SERVICE_NAME: "web"}},
            "addressType": "IPv4", "endpoints": endpoints,
        }))
    }

    fn endpoints(ready: &[&str], not_ready: &[&str]) -> Arc<Endpoints> {
        let a = |ps: &[&str]| -> Vec<_> {
            ps.iter()
                .map(|p| json!({"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "name": p}}))
                .collect()
        };
        obj(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "subsets": [{"addresses": a(ready), "notReadyAddresses": a(not_ready), "ports": [{"port": 80}]}],
        }))
    }

    fn snap() -> Snapshot {
        let mut s = Snapshot::default();
        s.services.insert(
            k("web"),
            obj(json!({"metadata": {"namespace": "ns", "name": "web"},
                       "spec": {"selector": {"app": "web"}}})),
        );
        s.pods.insert(k("a"), pod("a", true, false));
        s.pods.insert(k("b"), pod("b", false, false));
        s.pods.insert(k("c"), pod("c", true, true));
        s
    }

    #[test]
    fn right_endpoints_pass() {
        let mut s = snap();
        s.endpoint_slices.insert(
            k("web-x"),
            slice(&[("a", true), ("b", false), ("c", false)]),
        );
        s.endpoints.insert(k("web"), endpoints(&["a"], &["b"]));
        assert_eq!(check(&s, 10), Vec::<String>::new());
    }

    #[test]
    fn gone_unready_and_missing_pods_fail() {
        let mut s = snap();
        s.endpoint_slices.insert(
            k("web-x"),
            slice(&[("a", false), ("c", true), ("gone", true)]),
        );
        s.endpoints.insert(k("web"), endpoints(&["a", "c"], &[]));
        let problems = check(&s, 10);
        let text = problems.join("\n");
        assert!(text.contains("Pod a in a slice with ready=false"), "{text}");
        assert!(text.contains("Pod b missing from slices"), "{text}");
        assert!(text.contains("terminating Pod c shown ready"), "{text}");
        assert!(text.contains("Pod gone, which is gone"), "{text}");
        assert!(
            text.contains("addresses differ: 0 missing, 1 extra"),
            "{text}"
        );
        assert!(
            text.contains("notReadyAddresses differ: 1 missing"),
            "{text}"
        );
        assert_eq!(check(&s, 2).len(), 3, "two and a count of the rest");
    }
}
