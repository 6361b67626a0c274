//! Bytes per cached Pod in the runtime's Pod store (target ≤ 2.5 KB), and per cached
//! EndpointSlice, Endpoints and Service (kept packed as JSON, see `cache::packed`)
//! against the same objects held decoded.
//!
//! Decodes realistic Pod JSON (a Deployment's Pod as the API server returns it:
//! managedFields, two containers with images, env, resources, probes, mounts, a full
//! status), strips it the way the watch does and inserts it into the indexed store,
//! then reports the heap the store keeps per Pod (a counting global allocator) and the
//! decode + strip + insert time. Run: `cargo bench -p svcplane-tests --bench cache_memory`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::System;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_controller::shell::cache::strip;
use svcplane_controller::shell::cache::watched_pod::WatchedPod;
use svcplane_controller::shell::cache::{
    EndpointsStore, PodStore, ServiceStore, SliceStore, Store,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn pod_json(i: usize) -> String {
    let ns = format!("team-{}", i % 50);
    let app = format!("svc-{}", i / 10);
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{app}-7d9c8b6f5-{i:05x}","generateName":"{app}-7d9c8b6f5-","namespace":"{ns}",
"uid":"6f1c2a0e-4b7d-4c1e-9f3a-{i:012x}","resourceVersion":"{rv}","creationTimestamp":"2026-11-01T10:00:00Z",
"labels":{{"app":"{app}","pod-template-hash":"7d9c8b6f5","app.kubernetes.io/part-of":"shop"}},
"annotations":{{"kubectl.kubernetes.io/restartedAt":"2026-11-01T09:59:00Z","prometheus.io/scrape":"true"}},
"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{app}-7d9c8b6f5","uid":"0b8e7c1a-1111-2222-3333-444455556666","controller":true,"blockOwnerDeletion":true}}],
"managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-11-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}}}},"f:ownerReferences":{{}}}},"f:spec":{{"f:containers":{{}}}}}}}},
{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-11-01T10:00:05Z","fieldsType":"FieldsV1","subresource":"status","fieldsV1":{{"f:status":{{"f:conditions":{{}},"f:containerStatuses":{{}},"f:podIP":{{}},"f:podIPs":{{}}}}}}}}]}},
"spec":{{"nodeName":"node-{node}","serviceAccountName":"default","restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",
"containers":[{{"name":"app","image":"registry.example.com/shop/{app}:v1.42.7","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}},{{"name":"metrics","containerPort":9090,"protocol":"TCP"}}],
"env":[{{"name":"LOG_LEVEL","value":"info"}},{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"fieldPath":"metadata.name"}}}}}}],
"resources":{{"requests":{{"cpu":"250m","memory":"256Mi"}},"limits":{{"memory":"512Mi"}}}},
"readinessProbe":{{"httpGet":{{"path":"/ready","port":"http"}},"periodSeconds":5}},"livenessProbe":{{"httpGet":{{"path":"/live","port":"http"}}}},
"volumeMounts":[{{"name":"kube-api-access-abcde","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}}]}},
{{"name":"proxy","image":"registry.example.com/mesh/proxy:v2.1.0","ports":[{{"containerPort":15001,"protocol":"TCP"}}]}}],
"volumes":[{{"name":"kube-api-access-abcde","projected":{{"sources":[{{"serviceAccountToken":{{"path":"token","expirationSeconds":3607}}}}]}}}}],
"tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}]}},
"status":{{"phase":"Running","hostIP":"192.168.{h}.{l}","podIP":"10.{a}.{b}.{c}","podIPs":[{{"ip":"10.{a}.{b}.{c}"}}],"startTime":"2026-11-01T10:00:01Z","qosClass":"Burstable",
"conditions":[{{"type":"PodReadyToStartContainers","status":"True","lastTransitionTime":"2026-11-01T10:00:02Z"}},{{"type":"Initialized","status":"True","lastTransitionTime":"2026-11-01T10:00:01Z"}},
{{"type":"Ready","status":"True","lastTransitionTime":"2026-11-01T10:00:05Z"}},{{"type":"ContainersReady","status":"True","lastTransitionTime":"2026-11-01T10:00:05Z"}},{{"type":"PodScheduled","status":"True","lastTransitionTime":"2026-11-01T10:00:00Z"}}],
"containerStatuses":[{{"name":"app","ready":true,"restartCount":0,"image":"registry.example.com/shop/{app}:v1.42.7","imageID":"registry.example.com/shop/{app}@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","containerID":"containerd://{i:064x}","started":true,"state":{{"running":{{"startedAt":"2026-11-01T10:00:03Z"}}}}}}]}}}}"#,
        rv = 1000 + i,
        node = i % 5000,
        h = (i / 250) % 250,
        l = i % 250 + 1,
        a = i / 65536 % 256,
        b = i / 256 % 256,
        c = i % 256,
    )
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary
    // without it, as a quick check that it still works.
    let full = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::args()
        .skip_while(|a| a != "--pods")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 100_000 } else { 1_000 });
    let docs: Vec<String> = (0..n).map(pod_json).collect();
    let json_bytes: usize = docs.iter().map(String::len).sum();
    let mut store = PodStore::default();
    let region = Region::new(GLOBAL);
    let start = Instant::now();
    for d in &docs {
        let pod: Pod = serde_json::from_str(d).unwrap();
        store.upsert(Arc::new(strip::pod(pod)));
    }
    let elapsed = start.elapsed();
    let stats = region.change();
    // The runtime's path: decoding straight into the kept fields.
    let mut watched = PodStore::default();
    let start = Instant::now();
    for d in &docs {
        let pod: WatchedPod = serde_json::from_str(d).unwrap();
        watched.upsert(Arc::new(strip::watched_pod(pod)));
    }
    let watched_elapsed = start.elapsed();
    assert_eq!(watched.len(), n);
    // stats_alloc books reallocations into both totals already.
    let retained = stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated);
    println!("pods cached:                 {n}");
    println!("JSON per Pod (input):        {} B", json_bytes / n);
    println!(
        "heap kept per cached Pod:    {} B  (store, label index, node index; target <= 2560 B){}",
        retained / n,
        if full {
            ""
        } else {
            "\n  (a smoke run with few Pods: fixed costs weigh more. The figure the README \
             quotes is `cargo bench -p svcplane-tests --bench cache_memory`, 100 000 Pods)"
        }
    );
    println!(
        "decode as Pod + strip + insert:        {:.2} s total, {:.1} us per Pod",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "decode as WatchedPod + strip + insert: {:.2} s total, {:.1} us per Pod (the watch's path)",
        watched_elapsed.as_secs_f64(),
        watched_elapsed.as_secs_f64() * 1e6 / n as f64
    );
    assert_eq!(store.len(), n);
    drop((store, watched, docs));
    per_service_objects(if full { 10_000 } else { 100 });
}

/// What one Service of ten Pods costs in the other three stores: its slice, its
/// Endpoints and the Service itself, as the API server returns them.
fn per_service_objects(services: usize) {
    let slices: Vec<String> = (0..services).map(slice_json).collect();
    let endpoints: Vec<String> = (0..services).map(endpoints_json).collect();
    let svcs: Vec<String> = (0..services).map(service_json).collect();
    println!("\nServices (each: one slice and one Endpoints of 10 Pods): {services}");
    let (packed, decoded) = kept::<EndpointSlice, SliceStore>(&slices, strip::endpoint_slice);
    report("EndpointSlice", &slices, packed, decoded);
    let (packed, decoded) = kept::<Endpoints, EndpointsStore>(&endpoints, strip::endpoints);
    report("Endpoints", &endpoints, packed, decoded);
    let (packed, decoded) = kept::<Service, ServiceStore>(&svcs, strip::service);
    report("Service", &svcs, packed, decoded);
    let mut store = SliceStore::default();
    for d in &slices {
        store.upsert(Arc::new(strip::endpoint_slice(
            serde_json::from_str(d).unwrap(),
        )));
    }
    let start = Instant::now();
    let mut endpoints_read = 0;
    for i in 0..services {
        for s in store.of_service(&format!("team-{}", i % 50), &format!("svc-{i}")) {
            endpoints_read += s.endpoints().len();
        }
    }
    assert_eq!(endpoints_read, services * 10);
    println!(
        "reading one Service's packed slice back (a sync's read): {:.1} us",
        start.elapsed().as_secs_f64() * 1e6 / services as f64
    );
}

/// Heap kept per object by the store `S`, and by the same objects held decoded.
fn kept<K, S>(docs: &[String], strip: fn(K) -> K) -> (usize, usize)
where
    K: serde::de::DeserializeOwned,
    S: Store<Item = K> + Default,
{
    // Decoding inside the region is fine: what it frees again nets out.
    let region = Region::new(GLOBAL);
    let mut store = S::default();
    for d in docs {
        store.upsert(Arc::new(strip(serde_json::from_str(d).unwrap())));
    }
    let stats = region.change();
    let packed = stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated)
        / docs.len();
    drop(store);
    let region = Region::new(GLOBAL);
    let held: Vec<Arc<K>> = docs
        .iter()
        .map(|d| Arc::new(strip(serde_json::from_str(d).unwrap())))
        .collect();
    let stats = region.change();
    let decoded = stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated)
        / docs.len();
    drop(held);
    (packed, decoded)
}

fn report(kind: &str, docs: &[String], packed: usize, decoded: usize) {
    let json = docs.iter().map(String::len).sum::<usize>() / docs.len();
    println!(
        "heap per cached {kind:<13} {packed:>6} B packed, {decoded:>6} B decoded ({json} B of JSON from the API server)"
    );
}

const MANAGED_FIELDS: &str = r#""managedFields":[{"manager":"svcplane","operation":"Update","apiVersion":"v1","time":"2026-11-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]"#;

fn targets(i: usize) -> impl Iterator<Item = (usize, String, String)> {
    (0..10).map(move |p| {
        let n = i * 10 + p;
        (
            n,
            format!("svc-{i}-7d9c8b6f5-{n:05x}"),
            format!("10.{}.{}.{}", n / 65536 % 256, n / 256 % 256, n % 256),
        )
    })
}

fn target_ref(ns: &str, name: &str, n: usize) -> String {
    format!(
        r#"{{"kind":"Pod","namespace":"{ns}","name":"{name}","uid":"6f1c2a0e-4b7d-4c1e-9f3a-{n:012x}"}}"#
    )
}

fn meta(kind: &str, name: &str, ns: &str, i: usize, extra: &str) -> String {
    format!(
        r#""kind":"{kind}","metadata":{{"name":"{name}","namespace":"{ns}","uid":"0b8e7c1a-1111-2222-3333-{i:012x}","resourceVersion":"{rv}","generation":1,"creationTimestamp":"2026-11-01T10:00:00Z"{extra},{MANAGED_FIELDS}}}"#,
        rv = 5000 + i
    )
}

fn slice_json(i: usize) -> String {
    let ns = format!("team-{}", i % 50);
    let endpoints: Vec<String> = targets(i)
        .map(|(n, name, ip)| {
            format!(
                r#"{{"addresses":["{ip}"],"conditions":{{"ready":true,"serving":true,"terminating":false}},"nodeName":"node-{node}","zone":"zone-{z}","targetRef":{tr}}}"#,
                node = n % 5000,
                z = n % 3,
                tr = target_ref(&ns, &name, n)
            )
        })
        .collect();
    let extra = format!(
        r#","generateName":"svc-{i}-","labels":{{"endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io","kubernetes.io/service-name":"svc-{i}","app":"svc-{i}"}},"annotations":{{"endpoints.kubernetes.io/last-change-trigger-time":"2026-11-01T10:00:05Z"}},"ownerReferences":[{{"apiVersion":"v1","kind":"Service","name":"svc-{i}","uid":"0b8e7c1a-1111-2222-3333-{i:012x}","controller":true,"blockOwnerDeletion":true}}]"#
    );
    format!(
        r#"{{"apiVersion":"discovery.k8s.io/v1",{meta},"addressType":"IPv4","endpoints":[{eps}],"ports":[{{"name":"http","protocol":"TCP","port":8080}}]}}"#,
        meta = meta("EndpointSlice", &format!("svc-{i}-abcde"), &ns, i, &extra),
        eps = endpoints.join(",")
    )
}

fn endpoints_json(i: usize) -> String {
    let ns = format!("team-{}", i % 50);
    let addresses: Vec<String> = targets(i)
        .map(|(n, name, ip)| {
            format!(
                r#"{{"ip":"{ip}","nodeName":"node-{node}","targetRef":{tr}}}"#,
                node = n % 5000,
                tr = target_ref(&ns, &name, n)
            )
        })
        .collect();
    let extra = format!(
        r#","labels":{{"app":"svc-{i}","endpoints.kubernetes.io/managed-by":"endpoint-controller"}},"annotations":{{"endpoints.kubernetes.io/last-change-trigger-time":"2026-11-01T10:00:05Z"}}"#
    );
    format!(
        r#"{{"apiVersion":"v1",{meta},"subsets":[{{"addresses":[{a}],"ports":[{{"name":"http","port":8080,"protocol":"TCP"}}]}}]}}"#,
        meta = meta("Endpoints", &format!("svc-{i}"), &ns, i, &extra),
        a = addresses.join(",")
    )
}

fn service_json(i: usize) -> String {
    let ns = format!("team-{}", i % 50);
    let extra = format!(r#","labels":{{"app":"svc-{i}","app.kubernetes.io/part-of":"shop"}}"#);
    format!(
        r#"{{"apiVersion":"v1",{meta},"spec":{{"selector":{{"app":"svc-{i}"}},"ports":[{{"name":"http","protocol":"TCP","port":80,"targetPort":8080}}],"type":"ClusterIP","clusterIP":"10.96.{a}.{b}","clusterIPs":["10.96.{a}.{b}"],"ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","sessionAffinity":"None","internalTrafficPolicy":"Cluster"}},"status":{{"loadBalancer":{{}}}}}}"#,
        meta = meta("Service", &format!("svc-{i}"), &ns, i, &extra),
        a = i / 256 % 256,
        b = i % 256
    )
}
