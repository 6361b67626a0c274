// The node's private network namespace and the way into it from outside.
//
// Every component runs inside one network namespace per run, so nothing
// touches the host's network and parallel runs cannot collide: each can use the
// well-known ports. The node's address sits on a veth pair whose two ends both
// live in that namespace (this kernel has no dummy device). The test process
// stays in the host namespace; it reaches the API server through a loopback
// forwarder in this process whose upstream connections are opened inside the
// namespace.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// createNetns makes /run/netns/NAME with loopback up and the node address on
// a veth pair, forwarding on (pods are routed through the node).
func createNetns(name, nodeIP string) error {
	steps := [][]string{
		{"ip", "netns", "add", name},
		{"ip", "-n", name, "link", "set", "lo", "up"},
		{"ip", "-n", name, "link", "add", "node0", "type", "veth", "peer", "name", "node0-peer"},
		{"ip", "-n", name, "addr", "add", nodeIP + "/24", "dev", "node0"},
		{"ip", "-n", name, "link", "set", "node0-peer", "up"},
		{"ip", "-n", name, "link", "set", "node0", "up"},
		// A default route without a gateway: connections from the node to
		// ClusterIPs need some route before kube-proxy's DNAT picks the real
		// destination, and nothing outside is reachable anyway.
		{"ip", "-n", name, "route", "add", "default", "dev", "node0"},
		{"nsenter", "--net=" + netnsPath(name), "--", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func netnsPath(name string) string { return "/run/netns/" + name }

// dialInNetns opens a TCP connection from inside the namespace at nsPath. The
// socket is created on a thread moved into the namespace; that thread is never
// handed back to the scheduler (the goroutine ends locked, so the runtime
// discards it), and the connection works from any thread afterwards.
func dialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// netnsHTTPClient talks HTTP(S) to addresses inside the namespace.
func netnsHTTPClient(nsPath string, transport *http.Transport) *http.Client {
	transport.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
		return dialInNetns(ctx, nsPath, addr)
	}
	return &http.Client{Timeout: 3 * time.Second, Transport: transport}
}

// forwarder relays connections accepted on a host loopback port to target
// inside the namespace, byte for byte (TLS stays end to end).
type forwarder struct {
	ln     net.Listener
	nsPath string
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startForwarder(nsPath, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, nsPath: nsPath, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.relay(c)
		}()
	}
}

func (f *forwarder) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
}

func (f *forwarder) relay(down net.Conn) {
	defer down.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := dialInNetns(ctx, f.nsPath, f.target)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	f.track(down, true)
	f.track(up, true)
	defer f.track(down, false)
	defer f.track(up, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, down)
	go pipe(down, up)
	<-done
	<-done
}

func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
