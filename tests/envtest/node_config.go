package main

import (
	"fmt"
	"strings"
)

// The node's configuration files. Each setting that differs from a component's
// default is there because the machines the suites run on need it (2 vCPU VMs,
// cgroup v1 "hybrid" layout, no CAP_SYS_RESOURCE, no registry) or because a
// test fixture must not touch anything outside its run directory.

func containerdConfig(n *nodeRun) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
# Snapshotters and tracing that would only probe the host.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # No process here may lower its oom_score_adj (CAP_SYS_RESOURCE is not in
  # any bounding set): without this runc fails every sandbox.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Test apps may bind ports below 1024 without root.
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  # runc, not crun: crun fails on this cgroup v1 "hybrid" layout.
  BinaryName = %[6]q
  Root = %[7]q
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %[8]q
  conf_dir = %[9]q
  max_conf_num = 1
`, n.path("containerd/root"), n.path("containerd/state"), n.containerdSocket(),
		n.path("containerd/opt"), n.o.pauseImage, n.runc, n.path("containerd/runc"),
		n.cniBinDir, n.path("cni/net.d"))
}

// The pod network: ptp (a veth per pod, routed by the node) rather than a
// bridge, so pod-to-ClusterIP-to-pod traffic always crosses the node's IP
// stack, where kube-proxy's NAT is undone, without needing br_netfilter.
func cniConfig(n *nodeRun) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[2]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[3]q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.name, n.o.podCIDR, n.path("cni/ipam"))
}

func kubeletConfig(n *nodeRun) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1 ("hybrid"); the kubelet refuses them unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# Pods' cgroups under a root of this run's, so that they are found and removed.
cgroupRoot: /%[1]s
failSwapOn: false
# It may not lower its own oom_score_adj here (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[4]q
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [%[5]s]
resolvConf: %[6]q
podLogsDir: %[7]q
volumePluginDir: %[8]q
# The disk may be fuller than the default thresholds: neither evict pods nor
# collect the imported images (they cannot be pulled again).
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerNode: true
maxPods: 110
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, n.name, n.containerdSocket(), n.o.nodeIP, n.pki.caFile, n.clusterDNS,
		n.path("resolv.conf"), n.path("pod-logs"), n.path("kubelet/volume-plugins"))
}

func kubeProxyConfig(n *nodeRun) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %[1]s
clientConnection:
  kubeconfig: %[2]q
hostnameOverride: %[3]s
clusterCIDR: %[4]s
# It may not lower its own oom_score_adj here (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
# Leave the conntrack table's kernel-wide limits alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, n.o.proxyMode, n.path("kube-proxy.kubeconfig"), n.o.nodeName, n.o.podCIDR)
}

// kubeconfig for a component inside the namespace, authenticating with a token.
func componentKubeconfig(n *nodeRun, user, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://%[1]s:6443
    certificate-authority: %[2]s
contexts:
- name: node
  context:
    cluster: node
    user: %[3]s
current-context: node
users:
- name: %[3]s
  user:
    token: %[4]s
`, n.o.nodeIP, n.pki.caFile, user, token)
}

// The cluster DNS: CoreDNS as the kube-dns Service at the address the kubelet
// gives Pods, answering for cluster.local only (there is no upstream here).
func corednsManifest(n *nodeRun) string {
	return strings.ReplaceAll(fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 5
        }
        cache 5
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      terminationGracePeriodSeconds: 1
      securityContext:
        runAsUser: 65534
        runAsGroup: 65534
        runAsNonRoot: true
      containers:
      - name: coredns
        image: %[1]s
        # Imported into the node's containerd; there is no registry.
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 1
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          periodSeconds: 10
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: %[2]s
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
`, n.o.corednsImage, n.clusterDNS), "\t", "    ")
}
