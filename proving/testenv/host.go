package testenv

// This file is long because it is everything the cluster changes on the
// host (bridge, iptables chains, mounts, sysctls) with the undo of each
// beside it, so that teardown touches only what setup made.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The host changes a run makes, and how Down undoes each one. Everything here
// acts only on what the run recorded or what carries the run's own names.

// sysctls are the ones the kubelet, kube-proxy, the CNI bridge plugin or we
// may change. Their values are recorded before the run and restored after.
var sysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
}

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	return strings.TrimSpace(string(b)), err
}

func writeSysctl(name, value string) error {
	return os.WriteFile("/proc/sys/"+name, []byte(value+"\n"), 0o644)
}

// recordSysctls saves the current value of every sysctl a run may change.
func recordSysctls(s *state) error {
	return s.update(func(s *state) {
		for _, n := range sysctls {
			if v, err := readSysctl(n); err == nil {
				s.Sysctls[n] = v
			}
		}
	})
}

func restoreSysctls(s *state) []error {
	var errs []error
	names := make([]string, 0, len(s.Sysctls))
	for n := range s.Sysctls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if cur, err := readSysctl(n); err == nil && cur != s.Sysctls[n] {
			if err := writeSysctl(n, s.Sysctls[n]); err != nil {
				errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", n, s.Sysctls[n], err))
			}
		}
	}
	return errs
}

// Paths outside the run folder that the kubelet and libcni create.
var hostPaths = []string{"/var/log/containers", "/var/log/pods", "/var/lib/cni"}

// cgroupControllers lists the cgroup v1 hierarchies mounted on this host.
func cgroupControllers() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// recordAbsent notes host paths and cgroup folders that do not exist yet:
// those a run may create, and Down may remove.
func recordAbsent(s *state) error {
	return s.update(func(s *state) {
		for _, p := range hostPaths {
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				s.Created = append(s.Created, p)
			}
		}
		for _, c := range cgroupControllers() {
			p := filepath.Join(c, "kubepods")
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				s.Cgroups = append(s.Cgroups, p)
			}
		}
		entries, _ := os.ReadDir(netnsDir)
		for _, e := range entries {
			s.NetNS = append(s.NetNS, e.Name())
		}
	})
}

const netnsDir = "/var/run/netns"

// removeCgroups removes the cgroup trees the run created, deepest first.
// A cgroup folder is removed with rmdir: it fails while processes are in it.
func removeCgroups(s *state) []error {
	var errs []error
	for _, root := range s.Cgroups {
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errs
}

func removeCreatedPaths(s *state) []error {
	var errs []error
	for _, p := range s.Created {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return errs
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return slices.Compact(out), sc.Err()
}

// unescapeMount decodes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything at or below dir, deepest first. A mount
// appears once per bind, so it loops until none is left or nothing changes.
func unmountUnder(dir string) error {
	for range 10 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := unix.Unmount(mp, 0); err != nil {
				unix.Unmount(mp, unix.MNT_DETACH)
			}
		}
	}
	mps, _ := mountsUnder(dir)
	if len(mps) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(mps, ", "))
	}
	return nil
}

// removeNetNS unmounts and removes network namespace files the run created.
func removeNetNS(s *state) []error {
	entries, _ := os.ReadDir(netnsDir)
	var errs []error
	for _, e := range entries {
		if slices.Contains(s.NetNS, e.Name()) || !strings.HasPrefix(e.Name(), "cni-") {
			continue
		}
		p := filepath.Join(netnsDir, e.Name())
		unix.Unmount(p, unix.MNT_DETACH)
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Network devices.

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// iptables: chains whose names carry these prefixes are made by Kubernetes
// components, the CNI plugins or us. Only those that did not exist before a
// run are removed by its Down; no table is ever flushed.
var chainPrefixes = []string{"KUBE-", "CNI-", "DRAINGATE-"}

var iptablesTables = []string{"filter", "nat", "mangle", "raw"}

func iptablesBinaries() []string {
	var out []string
	for _, b := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(b); err == nil {
			out = append(out, b)
		}
	}
	return out
}

func ours(chain string) bool {
	for _, p := range chainPrefixes {
		if strings.HasPrefix(chain, p) {
			return true
		}
	}
	return false
}

// rules returns the `-S` listing of a table: "-N" chain lines and "-A" rules.
func rules(bin, table string) ([][]string, error) {
	out, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil, err
	}
	var res [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			res = append(res, splitQuoted(line))
		}
	}
	return res, nil
}

// splitQuoted splits an iptables-save style line, honouring double quotes.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// ourChains lists the chains with our prefixes in one table.
func ourChains(bin, table string) ([]string, error) {
	rs, err := rules(bin, table)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if len(r) == 2 && r[0] == "-N" && ours(r[1]) {
			out = append(out, r[1])
		}
	}
	return out, nil
}

func recordChains(s *state) error {
	chains := map[string][]string{}
	for _, bin := range iptablesBinaries() {
		for _, t := range iptablesTables {
			cs, err := ourChains(bin, t)
			if err != nil {
				continue // table not available in this kernel
			}
			chains[bin+"/"+t] = cs
		}
	}
	return s.update(func(s *state) { s.Chains = chains })
}

// removeChains deletes the rules that jump to chains the run created, then
// flushes and deletes those chains.
func removeChains(s *state) []error {
	var errs []error
	for _, bin := range iptablesBinaries() {
		for _, t := range iptablesTables {
			before := s.Chains[bin+"/"+t]
			rs, err := rules(bin, t)
			if err != nil {
				continue
			}
			created := map[string]bool{}
			for _, r := range rs {
				if len(r) == 2 && r[0] == "-N" && ours(r[1]) && !slices.Contains(before, r[1]) {
					created[r[1]] = true
				}
			}
			if len(created) == 0 {
				continue
			}
			for _, r := range rs {
				if len(r) < 2 || r[0] != "-A" || created[r[1]] || !created[jumpTarget(r)] {
					continue
				}
				args := append([]string{"-w", "-t", t, "-D"}, r[1:]...)
				if err := run(bin, args...); err != nil {
					errs = append(errs, err)
				}
			}
			for c := range created {
				if err := run(bin, "-w", "-t", t, "-F", c); err != nil {
					errs = append(errs, err)
				}
			}
			for c := range created {
				if err := run(bin, "-w", "-t", t, "-X", c); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errs
}

func jumpTarget(rule []string) string {
	for i := 0; i+1 < len(rule); i++ {
		if rule[i] == "-j" || rule[i] == "--jump" || rule[i] == "-g" || rule[i] == "--goto" {
			return rule[i+1]
		}
	}
	return ""
}

// leftovers reports what of a run is still on the host: used by Down to
// check its own work and by tests to prove it.
func leftovers(runDir string, s *state) []string {
	var out []string
	for _, p := range s.Processes {
		if p.alive() {
			out = append(out, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	if mps, _ := mountsUnder(runDir); len(mps) > 0 {
		out = append(out, "mounts: "+strings.Join(mps, ", "))
	}
	for _, l := range s.Links {
		if linkExists(l) {
			out = append(out, "network device "+l)
		}
	}
	for _, bin := range iptablesBinaries() {
		for _, t := range iptablesTables {
			cs, err := ourChains(bin, t)
			if err != nil {
				continue
			}
			for _, c := range cs {
				if !slices.Contains(s.Chains[bin+"/"+t], c) {
					out = append(out, fmt.Sprintf("%s chain %s/%s", bin, t, c))
				}
			}
		}
	}
	for _, c := range s.Cgroups {
		if _, err := os.Stat(c); err == nil {
			out = append(out, "cgroup "+c)
		}
	}
	out = append(out, ownNetNSLeft(s)...)
	if _, err := os.Stat(runDir); err == nil {
		out = append(out, "run folder "+runDir)
	}
	return out
}
