package main

// The control socket both modes serve, and its client (`envtest ctl`).
//
// One JSON request per connection, one JSON reply:
//
//	{"command": "kill-apiserver", "args": []}
//	-> {"ok": true} or {"ok": true, "detail": "..."} or {"error": "..."}
//
// Requests are handled one at a time on the main goroutine: children must be
// started from the thread whose exit their Pdeathsig watches (see main), and
// serial handling means a test never sees two faults half-applied at once.
//
// The default mode's commands (plane below; the node mode has restart-kcm only):
//
//	kill-apiserver           SIGKILL kube-apiserver and wait for it to exit
//	start-apiserver          start it again: same flags, certificates, etcd and
//	                         port; the reply comes once /readyz is ok
//	restart-apiserver        kill-apiserver, then start-apiserver
//	stop-apiserver-for SECS  SIGKILL it and reply at once; it is started again
//	                         SECS seconds later (poll /readyz for its return)
//	compact-etcd             compact etcd to its current revision (detail: the
//	                         revision); with --watch-cache=false a watch resumed
//	                         from an older resourceVersion then gets 410 Gone
//	kill-kcm                 SIGKILL kube-controller-manager
//	start-kcm [FLAG...]      start it (FLAGs added to the base flags)
//	restart-kcm [FLAG...]    SIGTERM it, then start-kcm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
)

type controlRequest struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	reply   chan controlReply
}

type controlReply struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

func fail(err error) controlReply { return controlReply{Error: err.Error()} }

// serveControlSocket listens on path and forwards each request to requests,
// writing back the reply the main goroutine sends on req.reply.
func serveControlSocket(path string, requests chan<- controlRequest) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var req controlRequest
				line, err := bufio.NewReader(c).ReadBytes('\n')
				var rep controlReply
				if err != nil && len(line) == 0 {
					return
				}
				if err := json.Unmarshal(line, &req); err != nil {
					rep = controlReply{Error: "bad request: " + err.Error()}
				} else {
					req.reply = make(chan controlReply, 1)
					requests <- req
					rep = <-req.reply
				}
				data, _ := json.Marshal(rep)
				_, _ = c.Write(append(data, '\n'))
			}()
		}
	}()
	return ln, nil
}

// runCtl is `envtest ctl SOCKET COMMAND [ARG...]` (also `envtest node-ctl`),
// the control socket's client for shells. A reply's detail goes to stdout.
func runCtl(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: envtest ctl SOCKET COMMAND [ARG...]")
	}
	c, err := net.Dial("unix", args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	req, err := json.Marshal(controlRequest{Command: args[1], Args: args[2:]})
	if err != nil {
		return err
	}
	if _, err := c.Write(append(req, '\n')); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return err
	}
	var rep controlReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return err
	}
	if !rep.OK {
		return errors.New(rep.Error)
	}
	if rep.Detail != "" {
		fmt.Println(rep.Detail)
	}
	return nil
}

// planeInfo is envtest.json, beside the kubeconfig: how a test reaches the
// control socket of a default-mode run.
type planeInfo struct {
	Kubeconfig            string `json:"kubeconfig"`
	ControlSocket         string `json:"controlSocket"`
	APIServer             string `json:"apiServer"`
	Dir                   string `json:"dir"`
	WatchCache            bool   `json:"watchCache"`
	KubeControllerManager bool   `json:"kubeControllerManager"`
	Pid                   int    `json:"pid"`
}

// plane is the default mode's control plane: etcd in process, kube-apiserver
// and optionally kube-controller-manager as children that the control socket
// can kill and start again.
type plane struct {
	dir     string
	self    string
	server  string
	pki     *pkiFiles
	etcd    *embed.Etcd
	apiArgs []string
	kcmArgs []string // base flags; nil without --kube-controller-manager
	kcmPort int
	startup time.Duration

	apiserver *child // nil while stopped on request
	kcm       *child // nil while stopped on request
}

func (p *plane) log(name string) string { return filepath.Join(p.dir, name+".log") }

func (p *plane) startAPIServer(ctx context.Context) error {
	if p.apiserver != nil {
		return errors.New("kube-apiserver is running")
	}
	c, err := startChild(p.self, p.apiArgs, p.log("kube-apiserver"))
	if err != nil {
		return err
	}
	p.apiserver = c
	if err := waitReady(ctx, p.server+"/readyz", p.pki, p.startup, c); err != nil {
		tail(p.log("kube-apiserver"))
		return err
	}
	return nil
}

func (p *plane) killAPIServer() error {
	if p.apiserver == nil {
		return errors.New("kube-apiserver is not running")
	}
	_ = p.apiserver.cmd.Process.Kill()
	<-p.apiserver.done
	p.apiserver = nil
	return nil
}

func (p *plane) startKCM(ctx context.Context, extra []string) error {
	if p.kcmArgs == nil {
		return errors.New("no kube-controller-manager in this run (start it with --kube-controller-manager)")
	}
	if p.kcm != nil {
		return errors.New("kube-controller-manager is running")
	}
	args := append(append([]string{}, p.kcmArgs...), extra...)
	c, err := startChild(p.self, args, p.log("kube-controller-manager"))
	if err != nil {
		return err
	}
	p.kcm = c
	// Give its informers a moment to sync before reporting ready.
	if err := waitHealthy(ctx, c, 2*time.Second); err != nil {
		tail(p.log("kube-controller-manager"))
		return err
	}
	return nil
}

// compact compacts etcd to its current revision, physically (the history is
// gone when the reply comes), and returns that revision.
func (p *plane) compact(ctx context.Context) (int64, error) {
	rev := p.etcd.Server.KV().Rev()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := p.etcd.Server.Compact(cctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	return rev, err
}

// exited is closed when a child the plane did not stop itself exits: the
// main loop treats that as a failure of the run, as before the socket existed.
func (p *plane) apiExited() <-chan struct{} {
	if p.apiserver == nil {
		return nil
	}
	return p.apiserver.done
}

func (p *plane) kcmExited() <-chan struct{} {
	if p.kcm == nil {
		return nil
	}
	return p.kcm.done
}

func (p *plane) stopAll() {
	if p.kcm != nil {
		p.kcm.stop()
		p.kcm = nil
	}
	if p.apiserver != nil {
		p.apiserver.stop()
		p.apiserver = nil
	}
}

// handle runs one request on the main goroutine. requests lets a delayed
// start (stop-apiserver-for) come back through the same serial loop.
func (p *plane) handle(ctx context.Context, req controlRequest, requests chan<- controlRequest) controlReply {
	ok := controlReply{OK: true}
	switch req.Command {
	case "kill-apiserver":
		if err := p.killAPIServer(); err != nil {
			return fail(err)
		}
	case "start-apiserver":
		if err := p.startAPIServer(ctx); err != nil {
			return fail(err)
		}
	case "restart-apiserver":
		if err := p.killAPIServer(); err != nil {
			return fail(err)
		}
		if err := p.startAPIServer(ctx); err != nil {
			return fail(err)
		}
	case "stop-apiserver-for":
		if len(req.Args) != 1 {
			return fail(errors.New("usage: stop-apiserver-for SECONDS"))
		}
		secs, err := strconv.ParseFloat(req.Args[0], 64)
		if err != nil || secs < 0 {
			return fail(fmt.Errorf("stop-apiserver-for: bad duration %q", req.Args[0]))
		}
		if err := p.killAPIServer(); err != nil {
			return fail(err)
		}
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(secs * float64(time.Second))):
			}
			again := controlRequest{Command: "start-apiserver", reply: make(chan controlReply, 1)}
			select {
			case requests <- again:
			case <-ctx.Done():
				return
			}
			if rep := <-again.reply; !rep.OK {
				fmt.Fprintf(os.Stderr, "envtest: starting kube-apiserver again: %s\n", rep.Error)
			}
		}()
	case "compact-etcd":
		rev, err := p.compact(ctx)
		if err != nil {
			return fail(fmt.Errorf("compact-etcd: %w", err))
		}
		ok.Detail = strconv.FormatInt(rev, 10)
	case "kill-kcm":
		if p.kcm == nil {
			return fail(errors.New("kube-controller-manager is not running"))
		}
		_ = p.kcm.cmd.Process.Kill()
		<-p.kcm.done
		p.kcm = nil
	case "start-kcm":
		if err := p.startKCM(ctx, req.Args); err != nil {
			return fail(err)
		}
	case "restart-kcm":
		if p.kcm != nil {
			p.kcm.stop()
			p.kcm = nil
		}
		if err := p.startKCM(ctx, req.Args); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown command %q (known: kill-apiserver, start-apiserver, "+
			"restart-apiserver, stop-apiserver-for, compact-etcd, kill-kcm, start-kcm, restart-kcm)", req.Command))
	}
	return ok
}

func (p *plane) writeInfo(kubeconfig, socket string, watchCache bool) error {
	data, err := json.MarshalIndent(planeInfo{
		Kubeconfig:            kubeconfig,
		ControlSocket:         socket,
		APIServer:             p.server,
		Dir:                   p.dir,
		WatchCache:            watchCache,
		KubeControllerManager: p.kcmArgs != nil,
		Pid:                   os.Getpid(),
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "envtest.json"), data, 0o644)
}
