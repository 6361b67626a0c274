// Command envtest is svcplane's real-control-plane test harness (test tooling
// only, not part of the product). It starts an embedded etcd, kube-apiserver
// and, optionally, upstream kube-controller-manager with only the endpoint
// controllers, all on loopback ports it picks, and prints the path of an
// admin kubeconfig on stdout once the API server's /readyz is ok.
//
// It stops everything and removes its temporary directory on SIGTERM/SIGINT,
// when its stdin reaches EOF (its parent died) or after --timeout.
//
// For the fault suites, a control socket (control.go; its path is in
// envtest.json beside the kubeconfig, and `envtest ctl SOCKET COMMAND` is a
// client) kills and starts kube-apiserver and kube-controller-manager and
// compacts etcd while the run goes on; --watch-cache=false makes compaction
// expire watches.
//
// The API server and controller manager run as child processes of this same
// binary (`envtest kube-apiserver ARGS...`, `envtest kube-controller-manager
// ARGS...`), so each keeps its own global state (feature gates, metrics,
// signal handling) and one build produces everything. `envtest kubectl ARGS...`
// is upstream kubectl at the same version, for suites that act as an operator
// would (`kubectl create`, `kubectl apply --dry-run=server`).
//
// `envtest node ...` runs a real single-node cluster instead (node.go), whose
// components are further commands of this binary: `envtest etcd`, `envtest
// kube-scheduler`, `envtest kubelet` and `envtest kube-proxy` beside the two
// above. `envtest node-cleanup` tears down node runs whose owner died, and
// `envtest node-ctl` (or `envtest ctl`) talks to a running node's control socket. The build links
// a real version (`-X k8s.io/component-base/version.gitVersion=...`, see
// tests/src/envtest/build.rs), which /version reports.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// Admission plugins enabled on top of kube-apiserver's defaults, as production
// clusters hardened beyond the defaults run them.
var hardenedAdmissionPlugins = []string{
	"OwnerReferencesPermissionEnforcement",
	"NodeRestriction",
	"AlwaysPullImages",
	"DenyServiceExternalIPs",
}

func main() {
	// Pdeathsig fires when the *thread* that started a child exits; keep the
	// children's starter on the main thread, which lives as long as we do.
	runtime.LockOSThread()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "kube-apiserver":
			cmd := apiserverapp.NewAPIServerCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "kube-controller-manager":
			cmd := kcmapp.NewControllerManagerCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "kube-scheduler":
			cmd := schedulerapp.NewSchedulerCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "kubelet":
			cmd := kubeletapp.NewKubeletCommand(context.Background())
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "kube-proxy":
			cmd := proxyapp.NewProxyCommand()
			cmd.SetArgs(os.Args[2:])
			os.Exit(cli.Run(cmd))
		case "etcd":
			exitOn(runEtcd(os.Args[2:]))
		case "node":
			exitOn(runNode(os.Args[2:]))
		case "node-cleanup":
			exitOn(runNodeCleanup())
		case "ctl", "node-ctl":
			exitOn(runCtl(os.Args[2:]))
		case "kubectl":
			// The e2e suites drive the API server the way operators do
			// (`kubectl create`, `kubectl apply --dry-run=server`, plugins
			// such as `kubectl svcplane`). kubectl finds plugins by reading
			// os.Args itself, so drop our own argv[0] first: os.Args is then
			// exactly what a standalone kubectl would see.
			os.Args = os.Args[1:]
			cmd := kubectlcmd.NewDefaultKubectlCommand()
			cmd.SetArgs(os.Args[1:])
			os.Exit(cli.Run(cmd))
		}
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "envtest: %v\n", err)
		os.Exit(1)
	}
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "envtest: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type options struct {
	serviceCIDRs   string
	nodePortRange  string
	controllers    string
	withKCM        bool
	timeout        time.Duration
	startupTimeout time.Duration
	keepLogs       bool
	watchStdin     bool
	watchCache     bool
	verbosity      int
}

func run() error {
	var o options
	flag.StringVar(&o.serviceCIDRs, "service-cluster-ip-range", "10.96.0.0/16,fd00:10:96::/112",
		"service CIDR, or one per family comma-separated (primary first)")
	flag.StringVar(&o.nodePortRange, "service-node-port-range", "30000-32767", "NodePort range")
	flag.BoolVar(&o.withKCM, "kube-controller-manager", false,
		"also run upstream kube-controller-manager with only --controllers")
	flag.StringVar(&o.controllers, "controllers", "endpointslice,endpoint,endpointslicemirroring",
		"controllers kube-controller-manager runs")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "stop everything after this long")
	flag.DurationVar(&o.startupTimeout, "startup-timeout", 2*time.Minute, "give up if not ready after this long")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "print the temp dir on stderr and do not remove it on exit")
	flag.BoolVar(&o.watchStdin, "watch-stdin", true, "shut down when stdin reaches EOF")
	flag.BoolVar(&o.watchCache, "watch-cache", true,
		"kube-apiserver's watch cache; off, watches are served from etcd, so a watch resumed "+
			"from a revision compact-etcd removed gets 410 Gone")
	flag.IntVar(&o.verbosity, "v", 0, "klog verbosity of the child processes")
	flag.Parse()

	dir, err := os.MkdirTemp("", "svcplane-envtest-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keepLogs {
			fmt.Fprintf(os.Stderr, "envtest: kept %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()

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

	// etcd, in process.
	etcdClient, etcdPeer, err := freePort(), freePort(), error(nil)
	cfg := embed.NewConfig()
	cfg.Name = "envtest"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdClient))}
	pu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPeer))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer etcd.Close()
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(o.startupTimeout):
		return errors.New("etcd not ready in time")
	case <-ctx.Done():
		return ctx.Err()
	}

	// Certificates, token, kubeconfig.
	pki, err := writePKI(dir, firstServiceIP(o.serviceCIDRs))
	if err != nil {
		return err
	}
	apiPort := freePort()
	server := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort))
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: %s
    certificate-authority: %s
contexts:
- name: envtest
  context:
    cluster: envtest
    user: admin
current-context: envtest
users:
- name: admin
  user:
    token: %s
`, server, pki.caFile, pki.token)), 0o600); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	apiArgs := []string{
		"kube-apiserver",
		"--etcd-servers=" + cu.String(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + pki.certFile,
		"--tls-private-key-file=" + pki.keyFile,
		"--client-ca-file=" + pki.caFile,
		"--token-auth-file=" + pki.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saKeyFile,
		"--service-account-signing-key-file=" + pki.saKeyFile,
		"--service-cluster-ip-range=" + o.serviceCIDRs,
		"--service-node-port-range=" + o.nodePortRange,
		"--authorization-mode=Node,RBAC",
		// kube-apiserver's default admission plugins stay on (this flag adds to
		// them), plus the ones hardened clusters add: OpenShift and clusters that
		// enable it run OwnerReferencesPermissionEnforcement, which refuses an owner
		// reference with blockOwnerDeletion to whoever cannot update the owner's
		// finalizers; svcplane's RBAC must pass it.
		"--enable-admission-plugins=" + strings.Join(hardenedAdmissionPlugins, ","),
		// The one default left out: no serviceaccount controller runs here, so the
		// ServiceAccount plugin would refuse every Pod (it admits Pods only).
		"--disable-admission-plugins=ServiceAccount",
		// The loopback address would be refused in the kubernetes Endpoints.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--v=" + strconv.Itoa(o.verbosity),
	}
	if !o.watchCache {
		apiArgs = append(apiArgs, "--watch-cache=false")
	}
	p := &plane{dir: dir, self: self, server: server, pki: pki, etcd: etcd, apiArgs: apiArgs,
		startup: o.startupTimeout}
	defer p.stopAll()
	if err := p.startAPIServer(ctx); err != nil {
		return err
	}

	if o.withKCM {
		// Its /metrics on a port of its own, readable without credentials, for the
		// tests that compare metric names with svcplane's; the URL is written beside
		// the kubeconfig. The port stays the same across restart-kcm.
		p.kcmPort = freePort()
		p.kcmArgs = []string{
			"kube-controller-manager",
			"--kubeconfig=" + kubeconfig,
			"--controllers=" + o.controllers,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p.kcmPort),
			"--cert-dir=" + filepath.Join(dir, "kcm-certs"),
			"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
			"--use-service-account-credentials=false",
			"--concurrent-service-endpoint-syncs=5",
			"--v=" + strconv.Itoa(o.verbosity),
		}
		metricsURL := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p.kcmPort)) + "/metrics"
		if err := os.WriteFile(filepath.Join(filepath.Dir(kubeconfig), "kcm-metrics-url"), []byte(metricsURL), 0o600); err != nil {
			return err
		}
		if err := p.startKCM(ctx, nil); err != nil {
			return err
		}
	}

	// The control socket (control.go), named in envtest.json beside the
	// kubeconfig, for the fault suites.
	requests := make(chan controlRequest)
	socket := filepath.Join(dir, "control.sock")
	ln, err := serveControlSocket(socket, requests)
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := p.writeInfo(kubeconfig, socket, o.watchCache); err != nil {
		return err
	}

	if o.keepLogs {
		fmt.Fprintf(os.Stderr, "envtest: logs in %s\n", dir)
	}
	fmt.Println(kubeconfig)
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-requests:
			req.reply <- p.handle(ctx, req, requests)
		// A child exiting on its own (not through the socket) ends the run, as
		// it always has: the suites would otherwise time out against nothing.
		case <-p.apiExited():
			fmt.Fprintln(os.Stderr, "envtest: kube-apiserver exited")
			tail(p.log("kube-apiserver"))
			return nil
		case <-p.kcmExited():
			fmt.Fprintln(os.Stderr, "envtest: kube-controller-manager exited")
			tail(p.log("kube-controller-manager"))
			return nil
		}
	}
}

type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(self string, args []string, logFile string) (*child, error) {
	return startProcess(self, args, logFile)
}

// startProcess starts path with args, output appended to logFile.
func startProcess(path string, args []string, logFile string) (*child, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The children die with us, whatever way we go.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) stop() { c.stopWithin(10 * time.Second) }

// stopWithin sends SIGTERM and, after grace, SIGKILL.
func (c *child) stopWithin(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func waitHealthy(ctx context.Context, c *child, d time.Duration) error {
	select {
	case <-c.done:
		return errors.New("child exited during startup")
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func waitReady(ctx context.Context, readyz string, p *pkiFiles, limit time.Duration, c *child) error {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(p.caFile)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+p.token)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s (last: %v)", limit, err)
		}
		select {
		case <-c.done:
			return errors.New("kube-apiserver exited during startup")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 40 {
			lines = lines[1:]
		}
	}
	fmt.Fprintf(os.Stderr, "--- last lines of %s ---\n%s\n", path, strings.Join(lines, "\n"))
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// firstServiceIP is the ClusterIP of the kubernetes Service, which belongs in
// the serving certificate's SANs.
func firstServiceIP(cidrs string) net.IP {
	_, n, err := net.ParseCIDR(strings.Split(cidrs, ",")[0])
	if err != nil {
		return nil
	}
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	return ip
}

type pkiFiles struct {
	caFile, certFile, keyFile, saKeyFile, tokenFile, token string
	// The CA, for the node mode's client certificates.
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func writePKI(dir string, serviceIP net.IP, extraIPs ...net.IP) (*pkiFiles, error) {
	p := &pkiFiles{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "svcplane-envtest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if serviceIP != nil {
		ips = append(ips, serviceIP)
	}
	ips = append(ips, extraIPs...)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.token = hex.EncodeToString(tok)
	p.caCert, p.caKey = caCert, caKey
	files := map[string][]byte{
		p.caFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		p.certFile:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		p.keyFile:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		p.saKeyFile: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		p.tokenFile: []byte(p.token + `,admin,admin,"system:masters"` + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
