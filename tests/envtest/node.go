// `envtest node`: a real single-node cluster for the operator suites.
//
// Where the default mode gives an API server with nothing behind it, this mode
// runs a kubelet-backed node: etcd, kube-apiserver, kube-controller-manager
// (default controllers), kube-scheduler, kube-proxy, kubelet and containerd,
// all inside a private network namespace of the run's own, plus CoreDNS
// deployed in the cluster from a locally built image. Like the default mode it
// prints the path of an admin kubeconfig on stdout once the node is Ready and
// CoreDNS serves, and stops on SIGTERM/SIGINT/SIGHUP, stdin EOF or --timeout.
//
// Stopping always runs the same teardown (node_cleanup.go), which also runs
// for a run whose owner was killed, from the next run or `envtest
// node-cleanup`. Needs root, containerd, runc, the CNI plugins, iproute2,
// nsenter and iptables (or nft).
//
// kube-controller-manager can be restarted alone with other flags while the
// node runs, through the control socket named in node.json:
// `envtest node-ctl SOCKET restart-kcm [FLAG...]` (the flags replace the
// --kcm-arg ones; the base flags stay).
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type nodeOptions struct {
	timeout        time.Duration
	startupTimeout time.Duration
	serviceCIDRs   string
	podCIDR        string
	nodeIP         string
	nodeName       string
	proxyMode      string
	kcmArgs        []string
	images         []string
	pauseImage     string
	corednsImage   string
	cniBinDir      string
	keepLogs       bool
	watchStdin     bool
	verbosity      int
}

// nodeRun is one running node.
type nodeRun struct {
	o          nodeOptions
	self       string
	name       string // svcplane-node-XXXX: run directory, netns, cgroup, CNI network
	dir        string
	rec        runRecord
	pki        *pkiFiles
	clusterDNS string
	runc       string
	cniBinDir  string
	fwd        *forwarder
	kubeconfig string
	tokens     map[string]string // user -> token

	mu       sync.Mutex
	children map[string]*child
	kcmGen   int // bumped on each deliberate KCM restart
}

// nodeInfo is node.json, beside the kubeconfig: what the test side needs.
type nodeInfo struct {
	Kubeconfig       string `json:"kubeconfig"`
	Netns            string `json:"netns"`
	NetnsPath        string `json:"netnsPath"`
	ContainerdSocket string `json:"containerdSocket"`
	ControlSocket    string `json:"controlSocket"`
	RunDir           string `json:"runDir"`
	LogDir           string `json:"logDir"`
	NodeName         string `json:"nodeName"`
	NodeIP           string `json:"nodeIP"`
	ServiceCIDRs     string `json:"serviceCIDRs"`
	PodCIDR          string `json:"podCIDR"`
	ClusterDNS       string `json:"clusterDNS"`
	APIServer        string `json:"apiServer"`
	Pid              int    `json:"pid"`
}

func (n *nodeRun) path(rel string) string { return filepath.Join(n.dir, rel) }

func (n *nodeRun) containerdSocket() string { return n.path("containerd/containerd.sock") }

func runNode(args []string) error {
	var o nodeOptions
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "stop everything after this long")
	fs.DurationVar(&o.startupTimeout, "startup-timeout", 3*time.Minute, "give up if not ready after this long")
	fs.StringVar(&o.serviceCIDRs, "service-cluster-ip-range", "10.96.0.0/16", "service CIDR(s), primary first")
	fs.StringVar(&o.podCIDR, "pod-cidr", "10.244.0.0/24", "the node's pod addresses")
	fs.StringVar(&o.nodeIP, "node-ip", "10.250.0.2", "the node's address (inside its namespace)")
	fs.StringVar(&o.nodeName, "node-name", "svcplane-node", "the Node's name")
	fs.StringVar(&o.proxyMode, "proxy-mode", "iptables", "kube-proxy mode: iptables or nftables")
	fs.Func("kcm-arg", "extra kube-controller-manager flag (repeatable), e.g. --controllers=*,-endpoint",
		func(s string) error { o.kcmArgs = append(o.kcmArgs, s); return nil })
	fs.Func("image", "OCI archive to import into containerd before the kubelet starts (repeatable)",
		func(s string) error { o.images = append(o.images, s); return nil })
	fs.StringVar(&o.pauseImage, "pause-image", "svcplane.test/pause:1", "containerd's sandbox image (must be imported)")
	fs.StringVar(&o.corednsImage, "coredns-image", "svcplane.test/coredns:1.15.0", "CoreDNS image (must be imported)")
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", "", "CNI plugins (default: /usr/lib/cni or /opt/cni/bin)")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the run directory's logs and configuration")
	fs.BoolVar(&o.watchStdin, "watch-stdin", true, "shut down when stdin reaches EOF")
	fs.IntVar(&o.verbosity, "v", 0, "klog verbosity of the components")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.proxyMode != "iptables" && o.proxyMode != "nftables" {
		return fmt.Errorf("--proxy-mode %q: iptables or nftables", o.proxyMode)
	}
	n := &nodeRun{o: o, children: map[string]*child{}, tokens: map[string]string{}}
	if err := n.preflight(); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-sigs
		cancel()
	}()
	if o.watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}

	dir, err := os.MkdirTemp("", "svcplane-node-")
	if err != nil {
		return err
	}
	n.dir = dir
	n.name = filepath.Base(dir)
	n.rec = runRecord{Name: n.name, Dir: dir, KeepLogs: o.keepLogs}
	if err := registerRun(&n.rec); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("registering the run: %w", err)
	}
	// From here on the teardown always runs, whatever happens below.
	start := time.Now()
	defer func() {
		t := time.Now()
		n.stopAll()
		for _, err := range unregisterRun(&n.rec) {
			fmt.Fprintf(os.Stderr, "envtest: teardown: %v\n", err)
		}
		if o.keepLogs {
			fmt.Fprintf(os.Stderr, "envtest: kept the logs in %s\n", n.path("logs"))
		}
		fmt.Fprintf(os.Stderr, "envtest: node torn down in %.1fs\n", time.Since(t).Seconds())
	}()

	kcmExited := make(chan struct{}, 1)
	if err := n.start(ctx, kcmExited); err != nil {
		n.tailLogs()
		return err
	}
	fmt.Fprintf(os.Stderr, "envtest: node %s ready in %.1fs (logs in %s)\n", n.name, time.Since(start).Seconds(), n.path("logs"))
	fmt.Println(n.kubeconfig)

	requests := make(chan controlRequest)
	ln, err := n.serveControl(requests)
	if err != nil {
		return err
	}
	defer ln.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-requests:
			req.reply <- n.handle(ctx, req, kcmExited)
		case <-kcmExited:
			fmt.Fprintln(os.Stderr, "envtest: kube-controller-manager exited")
			tail(n.path("logs/kube-controller-manager.log"))
			return errors.New("kube-controller-manager exited")
		}
	}
}

func (n *nodeRun) preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the node mode needs root")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	n.self = self
	for _, tool := range []string{"containerd", "ctr", "ip", "nsenter", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found on PATH", tool)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return errors.New("runc not found on PATH")
	}
	n.runc = runc
	tool := "iptables"
	if n.o.proxyMode == "nftables" {
		tool = "nft"
	}
	if _, err := exec.LookPath(tool); err != nil {
		return fmt.Errorf("%s not found on PATH (kube-proxy's %s mode)", tool, n.o.proxyMode)
	}
	n.cniBinDir = n.o.cniBinDir
	if n.cniBinDir == "" {
		for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
			if _, err := os.Stat(filepath.Join(d, "ptp")); err == nil {
				n.cniBinDir = d
				break
			}
		}
	}
	for _, p := range []string{"ptp", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(n.cniBinDir, p)); err != nil {
			return fmt.Errorf("CNI plugin %s not found in %q (containernetworking-plugins)", p, n.cniBinDir)
		}
	}
	_, svc, err := net.ParseCIDR(strings.Split(n.o.serviceCIDRs, ",")[0])
	if err != nil {
		return fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	// kube-dns takes the tenth address, as kubeadm does.
	ip := svc.IP.To4()
	if ip == nil {
		return errors.New("--service-cluster-ip-range: the primary range must be IPv4")
	}
	dns := make(net.IP, 4)
	copy(dns, ip)
	dns[3] += 10
	n.clusterDNS = dns.String()
	return nil
}

func (n *nodeRun) start(ctx context.Context, kcmExited chan struct{}) error {
	for _, d := range []string{"logs", "config", "containerd", "kubelet/pki", "kubelet/volume-plugins",
		"pod-logs", "cni/net.d", "cni/ipam", "etcd"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := createCgroups(n.name); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if err := createNetns(n.name, n.o.nodeIP); err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	nsPath := netnsPath(n.name)

	pki, err := writePKI(n.dir, firstServiceIP(n.o.serviceCIDRs), net.ParseIP(n.o.nodeIP))
	if err != nil {
		return err
	}
	n.pki = pki
	if err := n.writeCredentials(); err != nil {
		return err
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}

	// etcd and containerd first; the API server retries etcd until it answers.
	if err := n.startInNetns("etcd", "etcd", "--data-dir="+n.path("etcd"),
		"--log-file="+n.path("logs/etcd.log")); err != nil {
		return err
	}
	if err := n.startInNetns("containerd", "containerd", "--config="+n.path("config/containerd.toml")); err != nil {
		return err
	}
	if err := n.startInNetns("kube-apiserver", "kube-apiserver", n.apiserverArgs()...); err != nil {
		return err
	}
	fwd, err := startForwarder(nsPath, net.JoinHostPort(n.o.nodeIP, "6443"))
	if err != nil {
		return err
	}
	n.fwd = fwd
	n.kubeconfig = n.path("kubeconfig")
	if err := n.writeAdminKubeconfig(); err != nil {
		return err
	}

	// While the API server starts: wait for containerd and import the images.
	if err := n.waitFor(ctx, "containerd", 30*time.Second, func() error {
		c, err := net.Dial("unix", n.containerdSocket())
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		return err
	}
	for _, img := range n.o.images {
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.containerdSocket(), "-n", "k8s.io",
			"images", "import", img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v: %s", img, err, out)
		}
	}

	if err := waitReady(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", n.fwd.port()), n.pki,
		n.o.startupTimeout, n.children["kube-apiserver"]); err != nil {
		return err
	}

	if err := n.startInNetns("kubelet", "kubelet", n.kubeletArgs()...); err != nil {
		return err
	}
	if err := n.startInNetns("kube-proxy", "kube-proxy", "--config="+n.path("config/kube-proxy.yaml"),
		"--v="+strconv.Itoa(n.o.verbosity)); err != nil {
		return err
	}
	if err := n.startInNetns("kube-scheduler", "kube-scheduler", n.schedulerArgs()...); err != nil {
		return err
	}
	if err := n.startKCM(n.o.kcmArgs, kcmExited); err != nil {
		return err
	}
	n.watchExits(ctx)

	// CoreDNS goes in at once; its Pod waits for the node.
	manifest := n.path("config/coredns.yaml")
	if err := os.WriteFile(manifest, []byte(corednsManifest(n)), 0o644); err != nil {
		return err
	}
	if err := n.waitFor(ctx, "kube-system namespace", n.o.startupTimeout, func() error {
		out, err := exec.CommandContext(ctx, n.self, "kubectl", "--kubeconfig="+n.kubeconfig,
			"--cache-dir="+n.path("kube-cache"), "apply", "-f", manifest).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl apply: %v: %s", err, out)
		}
		return nil
	}); err != nil {
		return err
	}

	cs, err := n.clientset()
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, "Node Ready", n.o.startupTimeout, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.o.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("not Ready")
	}); err != nil {
		return err
	}
	// What Pods need before they can be created and started: the default
	// ServiceAccount (the ServiceAccount admission plugin) and the root CA
	// ConfigMap (their projected token volume).
	if err := n.waitFor(ctx, "default ServiceAccount and kube-root-ca.crt", n.o.startupTimeout, func() error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	proxyHealth := netnsHTTPClient(nsPath, &http.Transport{})
	if err := n.waitFor(ctx, "kube-proxy", n.o.startupTimeout, func() error {
		resp, err := proxyHealth.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := n.waitFor(ctx, "CoreDNS", n.o.startupTimeout, func() error {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("%d available", d.Status.AvailableReplicas)
		}
		return nil
	}); err != nil {
		return err
	}
	return n.writeInfo()
}

// waitFor polls check until it succeeds, the limit passes or ctx ends.
func (n *nodeRun) waitFor(ctx context.Context, what string, limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", what, limit, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *nodeRun) clientset() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// startInNetns runs `envtest <command> args...` (or a host binary for
// containerd) inside the node's namespace, through nsenter (`ip netns exec`
// would remount /sys and hide the cgroup hierarchies).
func (n *nodeRun) startInNetns(name, command string, args ...string) error {
	argv := []string{"--net=" + netnsPath(n.name), "--"}
	if command == "containerd" {
		bin, _ := exec.LookPath("containerd")
		argv = append(argv, bin)
	} else {
		argv = append(argv, n.self, command)
	}
	argv = append(argv, args...)
	c, err := startProcess("nsenter", argv, n.path("logs/"+name+".log"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.children[name] = c
	n.mu.Unlock()
	return nil
}

// watchExits ends the run when a component other than KCM dies (KCM has its
// own watch, aware of deliberate restarts).
func (n *nodeRun) watchExits(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, c := range n.children {
		if name == "kube-controller-manager" {
			continue
		}
		go func() {
			<-c.done
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "envtest: %s exited\n", name)
				tail(n.path("logs/" + name + ".log"))
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
		}()
	}
}

func (n *nodeRun) apiserverArgs() []string {
	plugins := make([]string, 0, len(hardenedAdmissionPlugins))
	for _, p := range hardenedAdmissionPlugins {
		// AlwaysPullImages rewrites every Pod's imagePullPolicy to Always, and
		// the node's images are imported, not pulled: there is no registry.
		// The node cluster keeps the other hardened plugins.
		if p != "AlwaysPullImages" {
			plugins = append(plugins, p)
		}
	}
	return []string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		"--advertise-address=" + n.o.nodeIP,
		"--secure-port=6443",
		"--cert-dir=" + n.path("apiserver-certs"),
		"--tls-cert-file=" + n.pki.certFile,
		"--tls-private-key-file=" + n.pki.keyFile,
		"--client-ca-file=" + n.pki.caFile,
		"--token-auth-file=" + n.pki.tokenFile,
		"--kubelet-client-certificate=" + n.path("kubelet-client.crt"),
		"--kubelet-client-key=" + n.path("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + n.pki.saKeyFile,
		"--service-account-signing-key-file=" + n.pki.saKeyFile,
		"--service-cluster-ip-range=" + n.o.serviceCIDRs,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=" + strings.Join(plugins, ","),
		"--allow-privileged=true",
		"--v=" + strconv.Itoa(n.o.verbosity),
	}
}

func (n *nodeRun) kubeletArgs() []string {
	return []string{
		"--config=" + n.path("config/kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"),
		"--root-dir=" + n.path("kubelet"),
		"--cert-dir=" + n.path("kubelet/pki"),
		"--hostname-override=" + n.o.nodeName,
		"--node-ip=" + n.o.nodeIP,
		"--v=" + strconv.Itoa(n.o.verbosity),
	}
}

func (n *nodeRun) schedulerArgs() []string {
	return []string{
		"--kubeconfig=" + n.path("kube-scheduler.kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--v=" + strconv.Itoa(n.o.verbosity),
	}
}

// kcmBaseArgs are the flags every KCM start gets; --kcm-arg and restart-kcm
// flags come after them (later flags win; --controllers is only ever set by
// those, so its default "*" applies otherwise).
func (n *nodeRun) kcmBaseArgs() []string {
	return []string{
		"--kubeconfig=" + n.path("kube-controller-manager.kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=10257",
		"--cert-dir=" + n.path("kcm-certs"),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + n.pki.saKeyFile,
		"--root-ca-file=" + n.pki.caFile,
		"--cluster-name=svcplane-node",
		"--v=" + strconv.Itoa(n.o.verbosity),
	}
}

func (n *nodeRun) startKCM(extra []string, exited chan struct{}) error {
	args := append(n.kcmBaseArgs(), extra...)
	if err := n.startInNetns("kube-controller-manager", "kube-controller-manager", args...); err != nil {
		return err
	}
	n.mu.Lock()
	c, gen := n.children["kube-controller-manager"], n.kcmGen
	n.mu.Unlock()
	if err := os.WriteFile(n.path("kcm.args"), []byte(strings.Join(extra, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	go func() {
		<-c.done
		n.mu.Lock()
		deliberate := n.kcmGen != gen
		n.mu.Unlock()
		if !deliberate {
			select {
			case exited <- struct{}{}:
			default:
			}
		}
	}()
	return nil
}

// waitKCMHealthy polls KCM's /healthz inside the namespace.
func (n *nodeRun) waitKCMHealthy(ctx context.Context) error {
	client := netnsHTTPClient(netnsPath(n.name), &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // its own self-signed cert
	})
	return n.waitFor(ctx, "kube-controller-manager", time.Minute, func() error {
		resp, err := client.Get("https://127.0.0.1:10257/healthz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz %d", resp.StatusCode)
		}
		return nil
	})
}

// stopAll stops the components: control loops and kubelet first, then the
// pods through the CRI (so containerd unmounts and detaches them), containerd,
// and the API server (SIGKILL after a grace period: it may take longer than
// 15 s to exit on SIGTERM) with etcd. Whatever survives is killed by the
// cgroup sweep in the teardown.
func (n *nodeRun) stopAll() {
	n.mu.Lock()
	children := n.children
	n.children = map[string]*child{}
	n.kcmGen++
	n.mu.Unlock()
	var wg sync.WaitGroup
	stop := func(name string, grace time.Duration) {
		if c, ok := children[name]; ok {
			c.stopWithin(grace)
		}
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop(name, 5*time.Second)
		}()
	}
	wg.Wait()
	if _, ok := children["containerd"]; ok {
		n.stopPods()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		stop("containerd", 5*time.Second)
	}()
	go func() {
		defer wg.Done()
		stop("kube-apiserver", 5*time.Second)
		stop("etcd", 5*time.Second)
	}()
	wg.Wait()
	if n.fwd != nil {
		n.fwd.close()
	}
}

// stopPods stops and removes every pod sandbox through the CRI: containerd
// then runs the CNI DEL, unmounts the pods' filesystems and stops their shims.
func (n *nodeRun) stopPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+n.containerdSocket(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, sb := range list.Items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
			_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
		}()
	}
	wg.Wait()
}

func (n *nodeRun) tailLogs() {
	for _, name := range []string{"kube-apiserver", "kubelet", "containerd", "kube-controller-manager"} {
		if _, err := os.Stat(n.path("logs/" + name + ".log")); err == nil {
			tail(n.path("logs/" + name + ".log"))
		}
	}
}

// writeCredentials adds the components' tokens to the API server's token
// file and writes the API server's client certificate for the kubelet.
func (n *nodeRun) writeCredentials() error {
	users := []struct{ user, groups, file string }{
		{"system:node:" + n.o.nodeName, "system:nodes", "kubelet.kubeconfig"},
		{"system:kube-proxy", "", "kube-proxy.kubeconfig"},
		{"system:kube-scheduler", "", "kube-scheduler.kubeconfig"},
		{"system:kube-controller-manager", "", "kube-controller-manager.kubeconfig"},
	}
	f, err := os.OpenFile(n.pki.tokenFile, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for i, u := range users {
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return err
		}
		token := hex.EncodeToString(tok)
		n.tokens[u.user] = token
		line := fmt.Sprintf("%s,%s,%d", token, u.user, 100+i)
		if u.groups != "" {
			line += fmt.Sprintf(",%q", u.groups)
		}
		if _, err := fmt.Fprintln(f, line); err != nil {
			return err
		}
		if err := os.WriteFile(n.path(u.file), []byte(componentKubeconfig(n, u.user, token)), 0o600); err != nil {
			return err
		}
	}
	return writeClientCert(n.pki, n.path("kubelet-client"), "kube-apiserver-kubelet-client", "system:masters")
}

// writeClientCert writes PREFIX.crt and PREFIX.key, a client certificate for
// cn in org signed by the run's CA.
func writeClientCert(p *pkiFiles, prefix, cn, org string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(prefix+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(prefix+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func (n *nodeRun) writeConfigs() error {
	files := map[string]string{
		"config/containerd.toml":         containerdConfig(n),
		"cni/net.d/10-svcplane.conflist": cniConfig(n),
		"config/kubelet.yaml":            kubeletConfig(n),
		"config/kube-proxy.yaml":         kubeProxyConfig(n),
		// No upstream resolver: the cluster DNS answers cluster.local only.
		"resolv.conf": "# svcplane test node: no upstream DNS\n",
	}
	for rel, text := range files {
		if err := os.WriteFile(n.path(rel), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *nodeRun) writeAdminKubeconfig() error {
	return os.WriteFile(n.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: svcplane-node
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
contexts:
- name: svcplane-node
  context:
    cluster: svcplane-node
    user: admin
current-context: svcplane-node
users:
- name: admin
  user:
    token: %s
`, n.fwd.port(), n.pki.caFile, n.pki.token)), 0o600)
}

func (n *nodeRun) writeInfo() error {
	info := nodeInfo{
		Kubeconfig:       n.kubeconfig,
		Netns:            n.name,
		NetnsPath:        netnsPath(n.name),
		ContainerdSocket: n.containerdSocket(),
		ControlSocket:    n.path("control.sock"),
		RunDir:           n.dir,
		LogDir:           n.path("logs"),
		NodeName:         n.o.nodeName,
		NodeIP:           n.o.nodeIP,
		ServiceCIDRs:     n.o.serviceCIDRs,
		PodCIDR:          n.o.podCIDR,
		ClusterDNS:       n.clusterDNS,
		APIServer:        fmt.Sprintf("https://127.0.0.1:%d", n.fwd.port()),
		Pid:              os.Getpid(),
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.path("node.json"), data, 0o644)
}

func (n *nodeRun) serveControl(requests chan<- controlRequest) (net.Listener, error) {
	return serveControlSocket(n.path("control.sock"), requests)
}

// handle runs on the main goroutine, so children keep being started from the
// thread whose exit their Pdeathsig watches.
func (n *nodeRun) handle(ctx context.Context, req controlRequest, kcmExited chan struct{}) controlReply {
	switch req.Command {
	case "restart-kcm":
		n.mu.Lock()
		old := n.children["kube-controller-manager"]
		n.kcmGen++
		n.mu.Unlock()
		if old != nil {
			old.stopWithin(10 * time.Second)
		}
		if err := n.startKCM(req.Args, kcmExited); err != nil {
			return controlReply{Error: err.Error()}
		}
		if err := n.waitKCMHealthy(ctx); err != nil {
			return controlReply{Error: err.Error()}
		}
		return controlReply{OK: true}
	default:
		return controlReply{Error: fmt.Sprintf("unknown command %q (known: restart-kcm)", req.Command)}
	}
}
