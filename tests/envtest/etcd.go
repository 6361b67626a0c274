package main

import (
	"errors"
	"flag"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd is `envtest etcd`: the node mode runs etcd as a child inside the
// node's network namespace, beside the API server that uses it (the default
// mode keeps it in process). Stops on SIGTERM/SIGINT.
func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dir := fs.String("data-dir", "", "data directory")
	client := fs.String("listen-client-url", "http://127.0.0.1:2379", "client URL")
	peer := fs.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL")
	logFile := fs.String("log-file", "", "log file (default: stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("etcd: --data-dir is required")
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "node"
	cfg.Dir = *dir
	cfg.LogLevel = "warn"
	if *logFile != "" {
		cfg.LogOutputs = []string{*logFile}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// A throwaway test store: durability buys nothing.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return errors.New("etcd not ready after a minute")
	case <-sigs:
		return nil
	}
	select {
	case <-sigs:
	case err := <-e.Err():
		return err
	}
	return nil
}
