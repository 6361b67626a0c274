//! The simulated cluster's objects, as the API server would store them.
//!
//! Objects are built as JSON with the fields a real cluster carries (managedFields, two
//! containers with probes and env, full status, Node images and conditions), because
//! decoding and caching cost scales with what is on the wire, not with what the
//! controllers read: a fixture Pod of 300 bytes would flatter the CPU and memory figures.
//! The Pod document is the one `tests/benches/cache_memory.rs` measures (about
//! 3.4 KB).
//!
//! Everything is deterministic: names, IPs and placement come from counters and a
//! seeded [`Rng`], timestamps from virtual time.

use serde_json::{Value, json};
use svcplane_controller::core::keys::{ANNOTATION_TOPOLOGY_MODE, LABEL_ZONE};

/// SplitMix64: small, seedable, good enough to place Pods and pick delays. The fake's
/// own generator is private to it, and a trace must not share its sequence anyway
/// (the fake draws generated names from it).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant at these sizes).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> std::time::Duration {
        let span = hi.saturating_sub(lo).max(1);
        std::time::Duration::from_millis(lo + self.next_u64() % span)
    }
}

/// The zones every trace uses.
pub const ZONES: [&str; 5] = ["zone-a", "zone-b", "zone-c", "zone-d", "zone-e"];

/// RFC 3339 time `secs` after the fake's default epoch (2026-01-01T00:00:00Z), so object
/// timestamps line up with the fake's own.
pub fn timestamp(secs: u64) -> String {
    let base = crate::fake_api::DEFAULT_START_SECONDS;
    let t = i64::try_from(secs).unwrap_or(0).saturating_add(base);
    jiff::Timestamp::from_second(t)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// A Node as the kubelet reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub zone: &'static str,
    /// Allocatable CPU in millicores.
    pub cpu_millis: u64,
    pub ready: bool,
    /// Seconds after the epoch of the last heartbeat (bumped by no-op updates).
    pub heartbeat: u64,
    pub index: usize,
}

impl NodeSpec {
    pub fn to_json(&self) -> Value {
        let i = self.index;
        let ready = if self.ready { "True" } else { "Unknown" };
        let hb = timestamp(self.heartbeat);
        let condition = |type_: &str, status: &str, reason: &str| {
            json!({"type": type_, "status": status, "lastHeartbeatTime": hb,
                   "lastTransitionTime": timestamp(0), "reason": reason,
                   "message": format!("{reason} on node {}", self.name)})
        };
        let cpu = format!("{}m", self.cpu_millis);
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": self.name,
                    "node.kubernetes.io/instance-type": "m6i.2xlarge",
                    "topology.kubernetes.io/region": "region-1",
                    LABEL_ZONE: self.zone,
                },
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
                "creationTimestamp": timestamp(0),
            },
            "spec": {"podCIDR": format!("10.{}.{}.0/24", 128 + i / 256 % 128, i % 256),
                     "providerID": format!("aws:///{}/i-{i:017x}", self.zone)},
            "status": {
                "capacity": {"cpu": cpu, "memory": "32386540Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
                "allocatable": {"cpu": cpu, "memory": "31371756Ki", "pods": "110", "ephemeral-storage": "96625420725"},
                "conditions": [
                    condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                    condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                    condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                    condition("Ready", ready, if self.ready { "KubeletReady" } else { "NodeStatusUnknown" }),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": format!("192.168.{}.{}", i / 250 % 250, i % 250 + 1)},
                    {"type": "Hostname", "address": self.name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("ec2{i:029x}"),
                             "bootID": format!("{i:032x}"), "kernelVersion": "6.1.0",
                             "osImage": "Ubuntu 24.04 LTS", "containerRuntimeVersion": "containerd://1.7.20",
                             "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                             "operatingSystem": "linux", "architecture": "amd64"},
                "images": [
                    {"names": ["registry.example.com/mesh/proxy@sha256:aa11", "registry.example.com/mesh/proxy:v2.1.0"], "sizeBytes": 53_000_000},
                    {"names": ["registry.k8s.io/kube-proxy@sha256:bb22", "registry.k8s.io/kube-proxy:v1.33.0"], "sizeBytes": 30_000_000},
                    {"names": ["registry.k8s.io/pause@sha256:cc33", "registry.k8s.io/pause:3.10"], "sizeBytes": 320_000},
                ],
            },
        })
    }
}

/// A ClusterIP Service selecting `app: <name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub namespace: String,
    pub name: String,
    /// Index into the service range (unique: the allocator repair would report
    /// duplicates as Warning events otherwise).
    pub index: usize,
    pub topology_auto: bool,
}

impl ServiceSpec {
    pub fn to_json(&self) -> Value {
        let i = self.index + 10;
        let ip = format!("10.96.{}.{}", i / 256, i % 256);
        let mut annotations = serde_json::Map::new();
        if self.topology_auto {
            annotations.insert(ANNOTATION_TOPOLOGY_MODE.into(), "Auto".into());
        }
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": self.name, "namespace": self.namespace,
                "uid": format!("00000000-5e11-4000-8000-{:012x}", self.index),
                "labels": {"app": self.name, "app.kubernetes.io/part-of": "shop"},
                "annotations": annotations,
                "creationTimestamp": timestamp(0),
            },
            "spec": {
                "type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
                "selector": {"app": self.name},
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
                    {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
                ],
            },
            "status": {"loadBalancer": {}},
        })
    }
}

/// One Pod's state in the trace: what the driver changes and re-sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub app: String,
    pub template_hash: String,
    pub node: String,
    /// Unique across the trace (see [`pod_ip`]).
    pub ip_index: u64,
    pub ready: bool,
    /// Seconds after the epoch.
    pub created: u64,
    pub ready_changed: u64,
}

/// A simulated object's JSON as the API server takes it on create (the benches that
/// load a real API server): no uid, times, managedFields or status.
pub fn for_create(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["uid", "creationTimestamp", "managedFields", "generateName"] {
            m.remove(k);
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// A unique Pod IP in 10.0.0.0/9 for each index.
pub fn pod_ip(n: u64) -> String {
    let n = n + 1;
    format!("10.{}.{}.{}", (n >> 16) % 128, (n >> 8) % 256, n % 256)
}

impl PodSpec {
    pub fn ip(&self) -> String {
        pod_ip(self.ip_index)
    }

    /// The Pod document (the shape of `tests/benches/cache_memory.rs`'s).
    pub fn to_json(&self) -> Value {
        let (app, hash, i) = (&self.app, &self.template_hash, self.ip_index);
        let ip = self.ip();
        let ready = if self.ready { "True" } else { "False" };
        let created = timestamp(self.created);
        let changed = timestamp(self.ready_changed);
        let container_state = if self.ready {
            json!({"running": {"startedAt": timestamp(self.created + 1)}})
        } else {
            json!({"waiting": {"reason": "ContainerCreating"}})
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": self.name, "generateName": format!("{app}-{hash}-"), "namespace": self.namespace,
                "uid": format!("6f1c2a0e-4b7d-4c1e-9f3a-{i:012x}"),
                "creationTimestamp": created,
                "labels": {"app": app, "pod-template-hash": hash, "app.kubernetes.io/part-of": "shop"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": timestamp(0), "prometheus.io/scrape": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                                     "uid": "0b8e7c1a-1111-2222-3333-444455556666", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created,
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}, "f:ownerReferences": {}}, "f:spec": {"f:containers": {}}}},
                    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": changed, "fieldsType": "FieldsV1",
                     "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}, "f:podIPs": {}}}},
                ],
            },
            "spec": {
                "nodeName": self.node, "serviceAccountName": "default", "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "containers": [
                    {"name": "app", "image": format!("registry.example.com/shop/{app}:v1.42.7"),
                     "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                     "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                     "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5},
                     "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}},
                     "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]},
                    {"name": "proxy", "image": "registry.example.com/mesh/proxy:v2.1.0", "ports": [{"containerPort": 15001, "protocol": "TCP"}]},
                ],
                "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            },
            "status": {
                "phase": "Running", "hostIP": format!("192.168.{}.{}", i / 250 % 250, i % 250 + 1),
                "podIP": ip, "podIPs": [{"ip": ip}], "startTime": created, "qosClass": "Burstable",
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": created},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": created},
                    {"type": "Ready", "status": ready, "lastTransitionTime": changed},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": changed},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": created},
                ],
                "containerStatuses": [
                    {"name": "app", "ready": self.ready, "restartCount": 0, "image": format!("registry.example.com/shop/{app}:v1.42.7"),
                     "imageID": format!("registry.example.com/shop/{app}@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
                     "containerID": format!("containerd://{i:064x}"), "started": self.ready, "state": container_state},
                ],
            },
        })
    }
}

/// `count` Nodes spread round-robin over the zones, each zone with its own CPU size
/// (`cpu_by_zone`, millicores; the same size everywhere when it has one entry).
pub fn nodes(count: usize, cpu_by_zone: &[u64]) -> Vec<NodeSpec> {
    (0..count)
        .map(|i| {
            let z = i % ZONES.len();
            NodeSpec {
                name: format!("node-{i:05}"),
                zone: ZONES[z],
                cpu_millis: cpu_by_zone
                    .get(z)
                    .or(cpu_by_zone.first())
                    .copied()
                    .unwrap_or(8000),
                ready: true,
                heartbeat: 0,
                index: i,
            }
        })
        .collect()
}

/// `count` Services spread over `namespaces` namespaces (`ns-000`, ...).
pub fn services(count: usize, namespaces: usize, topology_auto: bool) -> Vec<ServiceSpec> {
    (0..count)
        .map(|i| ServiceSpec {
            namespace: format!("ns-{:03}", i % namespaces.max(1)),
            name: format!("svc-{i:05}"),
            index: i,
            topology_auto,
        })
        .collect()
}

/// Hands out unique Pod names and IPs.
#[derive(Debug, Default)]
pub struct PodFactory {
    next: u64,
}

impl PodFactory {
    /// A new Pod of `service` on `node`, created (and, if `ready`, ready) at `now`.
    pub fn make(
        &mut self,
        service: &ServiceSpec,
        hash: &str,
        node: &str,
        ready: bool,
        now: u64,
    ) -> PodSpec {
        let n = self.next;
        self.next += 1;
        PodSpec {
            namespace: service.namespace.clone(),
            name: format!("{}-{hash}-{n:06x}", service.name),
            app: service.name.clone(),
            template_hash: hash.to_owned(),
            node: node.to_owned(),
            ip_index: n,
            ready,
            created: now,
            ready_changed: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_decode_as_their_types() {
        let node = &nodes(6, &[4000, 8000])[5];
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(node.to_json()).unwrap();
        assert_eq!(n.metadata.labels.unwrap()[LABEL_ZONE], "zone-a");
        let svc = &services(3, 2, true)[2];
        let s: k8s_openapi::api::core::v1::Service = serde_json::from_value(svc.to_json()).unwrap();
        assert_eq!(s.metadata.namespace.as_deref(), Some("ns-000"));
        let pod = PodFactory::default().make(svc, "abc", "node-00001", true, 5);
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.to_json()).unwrap();
        assert_eq!(p.status.unwrap().pod_ip.as_deref(), Some("10.0.0.1"));
        let len = serde_json::to_vec(&pod.to_json()).unwrap().len();
        assert!((3000..4500).contains(&len), "realistic Pod size, got {len}");
    }

    #[test]
    fn pod_ips_are_unique() {
        let ips: std::collections::BTreeSet<String> = (0..200_000).map(pod_ip).collect();
        assert_eq!(ips.len(), 200_000);
    }
}
