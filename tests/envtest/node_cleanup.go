// Leaving the machine as the node found it.
//
// A node run changes things outside its own directory: the kubelet sets
// kernel-wide sysctls and creates a few fixed paths, `ip netns add` mounts
// /run/netns, containerd leaves shim sockets in /run/containerd/s, and pods
// leave processes, cgroups and mounts behind when they are not stopped. Each
// run therefore writes a record (/run/svcplane-node/runs/NAME.json) before it
// changes anything, and the first run on a clean machine writes a baseline
// (/run/svcplane-node/baseline.json: the sysctls and which of those paths
// existed). Whoever ends a run (the run itself, or a later run or `envtest
// node-cleanup` finding that the run's owner died without cleaning up) tears
// down the run's own things; the last run out restores the baseline. Parallel
// runs are safe: global state is restored only when no other run is alive.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const registryDir = "/run/svcplane-node"

// The sysctls the kubelet sets kernel-wide at start (its "kernel tunables").
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// Paths outside a run's directory that the kubelet, containerd or `ip netns`
// create whatever they are configured with; parents before children.
var globalPaths = []string{
	"/run/netns",
	"/run/containerd",
	"/run/containerd/s",
	"/run/containerd/fifo",
	"/var/lib/cni",
	"/var/lib/cni/results",
	"/var/lib/kubelet",
	"/var/lib/kubelet/device-plugins",
	"/var/log/containers",
	// util-linux's mount(8), which the kubelet runs, keeps its lock files here.
	"/run/mount",
}

// Global paths removed only when empty: tools other than ours use them too.
var onlyIfEmpty = map[string]bool{"/run/mount": true}

// runRecord is what a later process needs to tear a run down.
type runRecord struct {
	Name       string `json:"name"` // netns, cgroup and CNI network name
	Dir        string `json:"dir"`
	Owner      int    `json:"owner"`
	OwnerStart string `json:"ownerStart"` // /proc/PID/stat start time: PIDs are reused
	KeepLogs   bool   `json:"keepLogs"`
}

type baseline struct {
	Sysctls map[string]string `json:"sysctls"`
	Existed map[string]bool   `json:"existed"`
}

// withRegistryLock runs f holding the machine-wide lock on the registry.
func withRegistryLock(f func() error) error {
	if err := os.MkdirAll(filepath.Join(registryDir, "runs"), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(registryDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	return f()
}

func processStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name may hold spaces; the fields after it do not.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

func (r *runRecord) alive() bool {
	return r.OwnerStart != "" && processStart(r.Owner) == r.OwnerStart
}

func readRecords() ([]runRecord, error) {
	entries, err := os.ReadDir(filepath.Join(registryDir, "runs"))
	if err != nil {
		return nil, err
	}
	var out []runRecord
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(registryDir, "runs", e.Name()))
		if err != nil {
			continue
		}
		var r runRecord
		if json.Unmarshal(data, &r) == nil && r.Name != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

func recordPath(name string) string {
	return filepath.Join(registryDir, "runs", name+".json")
}

// registerRun reaps runs whose owner died, records the baseline if no run is
// alive, and records this run; all under the lock.
func registerRun(r *runRecord) error {
	r.Owner = os.Getpid()
	r.OwnerStart = processStart(r.Owner)
	return withRegistryLock(func() error {
		others, err := reapStale()
		if err != nil {
			return err
		}
		if others == 0 {
			if err := writeBaseline(); err != nil {
				return err
			}
		}
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return os.WriteFile(recordPath(r.Name), data, 0o600)
	})
}

// reapStale tears down every recorded run whose owner is gone and returns how
// many live runs remain. Called with the lock held.
func reapStale() (int, error) {
	records, err := readRecords()
	if err != nil {
		return 0, err
	}
	live := 0
	for i := range records {
		r := &records[i]
		if r.alive() {
			live++
			continue
		}
		fmt.Fprintf(os.Stderr, "envtest: cleaning up %s (its owner, PID %d, is gone)\n", r.Name, r.Owner)
		for _, err := range teardownLocal(r) {
			fmt.Fprintf(os.Stderr, "envtest: cleanup of %s: %v\n", r.Name, err)
		}
		_ = os.Remove(recordPath(r.Name))
	}
	if live == 0 {
		if err := restoreBaseline(); err != nil {
			return 0, err
		}
	}
	return live, nil
}

func writeBaseline() error {
	b := baseline{Sysctls: map[string]string{}, Existed: map[string]bool{}}
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err == nil {
			b.Sysctls[s] = strings.TrimSpace(string(v))
		}
	}
	for _, p := range globalPaths {
		_, err := os.Lstat(p)
		b.Existed[p] = err == nil
	}
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(registryDir, "baseline.json"), data, 0o600)
}

// restoreBaseline puts back what the baseline recorded and removes it; a
// missing baseline means there is nothing to restore. Called with the lock held
// when no run is alive.
func restoreBaseline() error {
	path := filepath.Join(registryDir, "baseline.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var b baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	for s, v := range b.Sysctls {
		cur, err := os.ReadFile("/proc/sys/" + s)
		if err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", s, v, err))
		}
	}
	// Children first, so a parent that existed keeps only what it had.
	for i := len(globalPaths) - 1; i >= 0; i-- {
		p := globalPaths[i]
		existed, known := b.Existed[p]
		if !known || existed {
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if (p == "/run/netns" || onlyIfEmpty[p]) && !emptyDir(p) {
			// Someone else's files live there now: leave it.
			continue
		}
		for _, mp := range mountsUnder(p) {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			}
		}
		if len(mountsUnder(p)) > 0 {
			errs = append(errs, fmt.Errorf("%s is still mounted; not removed", p))
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(path)
	}
	return errors.Join(errs...)
}

func emptyDir(p string) bool {
	entries, err := os.ReadDir(p)
	return err == nil && len(entries) == 0
}

// unregisterRun tears the run down and, if it was the last one alive,
// restores the baseline.
func unregisterRun(r *runRecord) []error {
	errs := teardownLocal(r)
	err := withRegistryLock(func() error {
		_ = os.Remove(recordPath(r.Name))
		_, err := reapStale()
		return err
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// teardownLocal removes what belongs to one run: its processes (everything in
// its cgroup), mounts, network namespace, directory, cgroups, CNI result
// files and container log links. Safe to repeat.
func teardownLocal(r *runRecord) []error {
	var errs []error
	if err := killCgroupTree(r.Name); err != nil {
		errs = append(errs, err)
	}
	for _, mp := range mountsUnder(r.Dir) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	nsPath := filepath.Join("/run/netns", r.Name)
	if _, err := os.Lstat(nsPath); err == nil {
		if out, err := exec.Command("ip", "netns", "delete", r.Name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %v: %s", r.Name, err, out))
		}
	}
	if err := removeRunDir(r); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(r.Name); err != nil {
		errs = append(errs, err)
	}
	// libcnis result cache is keyed by network name, which is the run's.
	if entries, err := os.ReadDir("/var/lib/cni/results"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), r.Name+"-") {
				_ = os.Remove(filepath.Join("/var/lib/cni/results", e.Name()))
			}
		}
	}
	// The kubelet links each container log into /var/log/containers.
	if entries, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/var/log/containers", e.Name())
			if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, r.Dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	removeStaleShimSockets()
	return errs
}

// removeRunDir deletes the run's directory, or with KeepLogs everything but its
// logs and configuration. Refuses while anything is still mounted below it: a
// leftover bind mount could lead into the host's own files.
func removeRunDir(r *runRecord) error {
	if r.Dir == "" || !strings.HasPrefix(filepath.Base(r.Dir), "svcplane-node-") {
		return fmt.Errorf("refusing to remove %q", r.Dir)
	}
	if left := mountsUnder(r.Dir); len(left) > 0 {
		return fmt.Errorf("not removing %s: still mounted: %s", r.Dir, strings.Join(left, ", "))
	}
	if !r.KeepLogs {
		return os.RemoveAll(r.Dir)
	}
	for _, sub := range []string{"containerd", "kubelet", "etcd", "cni"} {
		if err := os.RemoveAll(filepath.Join(r.Dir, sub)); err != nil {
			return err
		}
	}
	return nil
}

// removeStaleShimSockets removes shim sockets in /run/containerd/s that nobody
// listens on any more (containerd leaves them when a shim is killed).
func removeStaleShimSockets() {
	dir := "/run/containerd/s"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", p, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(p)
		}
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil || dir == "" {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupMounts lists the mounted cgroup hierarchies (v1 and v2) and the one
// that tracks processes: the v1 pids hierarchy, else the v2 one.
func cgroupMounts() (all []string, tracker string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, ""
	}
	var v2 string
	for _, line := range strings.Split(string(data), "\n") {
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		f := strings.Fields(line[:sep])
		rest := strings.Fields(line[sep+3:])
		if len(f) < 5 || len(rest) < 3 {
			continue
		}
		mp := unescapeMount(f[4])
		switch rest[0] {
		case "cgroup":
			all = append(all, mp)
			for _, opt := range strings.Split(rest[2], ",") {
				if opt == "pids" {
					tracker = mp
				}
			}
		case "cgroup2":
			all = append(all, mp)
			v2 = mp
		}
	}
	if tracker == "" {
		tracker = v2
	}
	return all, tracker
}

// createCgroups makes /NAME in every hierarchy (the kubelet's cgroupRoot must
// exist) and moves this process into /NAME/node of the tracking hierarchy, so
// that every process of the run (components, shims, pods) is found there.
func createCgroups(name string) error {
	all, tracker := cgroupMounts()
	if tracker == "" {
		return errors.New("no cgroup hierarchy mounted")
	}
	for _, root := range all {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// A new v1 cpuset is empty and admits no process until given CPUs and
		// memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(root, f)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
		}
		// On a v2-only machine the kubelet's pods need the controllers delegated.
		if v, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); err == nil && root == tracker {
			var ctl []string
			for _, c := range strings.Fields(string(v)) {
				ctl = append(ctl, "+"+c)
			}
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(ctl, " ")), 0o644)
		}
	}
	node := filepath.Join(tracker, name, "node")
	if err := os.MkdirAll(node, 0o755); err != nil {
		return err
	}
	if err := rememberOwnCgroup(tracker); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(node, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// killCgroupTree SIGKILLs every process in /NAME of the tracking hierarchy but
// this one, until none is left (a dying shim may still fork).
func killCgroupTree(name string) error {
	_, tracker := cgroupMounts()
	if tracker == "" {
		return nil
	}
	root := filepath.Join(tracker, name)
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	self := os.Getpid()
	for attempt := 0; attempt < 100; attempt++ {
		var pids []int
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("processes remain in the cgroup %s", root)
}

// removeCgroups removes /NAME, deepest first, in every hierarchy; this process
// first leaves it for the root of the tracking hierarchy.
func removeCgroups(name string) error {
	all, tracker := cgroupMounts()
	if tracker != "" {
		if _, err := os.Stat(filepath.Join(tracker, name)); err == nil {
			_ = moveSelfOut(tracker, name)
		}
	}
	var errs []error
	for _, root := range all {
		top := filepath.Join(root, name)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			// A cgroup whose last process just died may be busy for a moment.
			for try := 0; try < 40; try++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ownCgroup is where this process was in the tracking hierarchy before
// createCgroups moved it.
var ownCgroup = "/"

func rememberOwnCgroup(tracker string) error {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	v2 := !strings.HasSuffix(tracker, "/pids")
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if (v2 && parts[0] == "0") || (!v2 && strings.Contains(","+parts[1]+",", ",pids,")) {
			ownCgroup = parts[2]
		}
	}
	return nil
}

// moveSelfOut moves this process back where it was if it is inside /NAME.
func moveSelfOut(tracker, name string) error {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	if !strings.Contains(string(data), "/"+name) {
		return nil
	}
	return os.WriteFile(filepath.Join(tracker, ownCgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// runNodeCleanup is `envtest node-cleanup`: tear down every run whose owner is
// gone and restore the baseline when nothing is left running.
func runNodeCleanup() error {
	return withRegistryLock(func() error {
		live, err := reapStale()
		if err == nil && live > 0 {
			fmt.Fprintf(os.Stderr, "envtest: %d node run(s) still alive; left alone\n", live)
		}
		return err
	})
}
