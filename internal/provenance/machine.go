package provenance

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/admit-go/admit/internal/tsc"
)

// Machine describes where a result was measured: what makes the same code
// fast on one machine and slow on another. A cache-line transfer between
// two vCPUs that share a cache costs a fraction of one between vCPUs that
// share none; a clock source without an invariant counter (kvm-clock
// without RDTSCP) makes every clock read slower and turns keyed's counter
// clock off. Inside a virtual machine the cache topology is the one the
// hypervisor reports, which need not be the host's.
type Machine struct {
	Host           string
	CPUModel       string // model name, with family, model and stepping
	VCPUs          int    // CPUs this process may run on
	ThreadsPerCore int    // 0 where unknown
	Caches         []Cache
	Virtualization string // "KVM guest", "a guest (hypervisor unknown)", "none", "unknown"
	Kernel         string
	ClockSource    string // the kernel's current clocksource; "unknown" outside Linux
	TSCFlags       []string
	CounterClock   bool // internal/tsc reads the clock through the counter: keyed's system clock does
}

// Cache is one level of cache as the first CPU sees it.
type Cache struct {
	Level     int
	Type      string // Data, Instruction, Unified
	Size      string // as sysfs spells it: 48K
	Instances int    // distinct instances across the CPUs
	SharedBy  string // the CPUs sharing the first CPU's instance (sysfs list), or "" if it is its own
}

// Name is the cache's usual short name: L1d, L1i, L2, L3.
func (c Cache) Name() string {
	switch c.Type {
	case "Data":
		return fmt.Sprintf("L%dd", c.Level)
	case "Instruction":
		return fmt.Sprintf("L%di", c.Level)
	}
	return fmt.Sprintf("L%d", c.Level)
}

// Describe describes the machine this process runs on.
func Describe() Machine {
	m := describe(os.DirFS("/"), runtime.NumCPU())
	m.Host, _ = os.Hostname()
	m.CounterClock = tsc.Supported()
	if m.Virtualization == "a guest (hypervisor unknown)" {
		if v := lscpuHypervisor(); v != "" {
			m.Virtualization = v + " guest"
		}
	}
	return m
}

// describe reads what it can from root (a file system rooted like /):
// /proc/cpuinfo, /proc/sys/kernel/osrelease and the cache, topology and
// clocksource trees under /sys. What it cannot read stays empty or
// "unknown".
func describe(root fs.FS, vcpus int) Machine {
	m := Machine{VCPUs: vcpus, Virtualization: "unknown", ClockSource: "unknown", Kernel: "unknown", CPUModel: runtime.GOARCH}
	if b, err := fs.ReadFile(root, "proc/cpuinfo"); err == nil {
		info := cpuinfo(string(b))
		if info["model name"] != "" {
			m.CPUModel = info["model name"]
			if info["cpu family"] != "" {
				m.CPUModel += fmt.Sprintf(" (family %s model %s stepping %s)", info["cpu family"], info["model"], info["stepping"])
			}
		}
		flags := strings.Fields(info["flags"])
		for _, f := range []string{"rdtscp", "constant_tsc", "nonstop_tsc"} {
			if slices.Contains(flags, f) {
				m.TSCFlags = append(m.TSCFlags, f)
			}
		}
		m.Virtualization = "none"
		if slices.Contains(flags, "hypervisor") {
			m.Virtualization = "a guest (hypervisor unknown)"
		}
	}
	if b, err := fs.ReadFile(root, "proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := fs.ReadFile(root, "sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		m.ClockSource = strings.TrimSpace(string(b))
	}
	if sib, err := fs.ReadFile(root, "sys/devices/system/cpu/cpu0/topology/thread_siblings_list"); err == nil {
		m.ThreadsPerCore = len(cpuList(strings.TrimSpace(string(sib))))
	}
	m.Caches = caches(root)
	return m
}

// cpuinfo returns the first processor's fields of /proc/cpuinfo.
func cpuinfo(s string) map[string]string {
	info := map[string]string{}
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) == "" && len(info) > 0 {
			break // the end of the first processor
		}
		k, v, ok := strings.Cut(line, ":")
		if ok {
			info[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return info
}

// caches reads cpu0's caches and, for each, how many distinct instances
// the CPUs have between them.
func caches(root fs.FS) []Cache {
	const cpus = "sys/devices/system/cpu"
	dirs, _ := fs.Glob(root, cpus+"/cpu0/cache/index*")
	var cs []Cache
	for _, d := range dirs {
		read := func(dir, name string) string {
			b, _ := fs.ReadFile(root, path.Join(dir, name))
			return strings.TrimSpace(string(b))
		}
		level, err := strconv.Atoi(read(d, "level"))
		if err != nil {
			continue
		}
		c := Cache{Level: level, Type: read(d, "type"), Size: read(d, "size")}
		if shared := read(d, "shared_cpu_list"); len(cpuList(shared)) > 1 {
			c.SharedBy = shared
		}
		seen := map[string]bool{}
		all, _ := fs.Glob(root, cpus+"/cpu*/cache/"+path.Base(d)+"/shared_cpu_list")
		for _, f := range all {
			b, _ := fs.ReadFile(root, f)
			seen[strings.TrimSpace(string(b))] = true
		}
		c.Instances = len(seen)
		cs = append(cs, c)
	}
	slices.SortStableFunc(cs, func(a, b Cache) int { return a.Level - b.Level })
	return cs
}

// cpuList expands a sysfs CPU list ("0-3,8") into its CPUs; nil if it
// cannot be read.
func cpuList(s string) []int {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// lscpuHypervisor is lscpu's "Hypervisor vendor" (read from CPUID, which
// /proc and /sys do not show), or "".
func lscpuHypervisor() string {
	out, err := exec.Command("lscpu").Output()
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Hypervisor vendor" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// size turns sysfs's "491520K" into "480 MiB", "48K" into "48 KiB".
func size(s string) string {
	k, ok := strings.CutSuffix(s, "K")
	n, err := strconv.Atoi(k)
	if !ok || err != nil {
		return s
	}
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d MiB", n/1024)
	}
	return fmt.Sprintf("%d KiB", n)
}

// CacheLine describes the caches: each level's size, and whether the vCPUs
// share it: "L1d 48 KiB per vCPU, ..., L3 480 MiB shared by CPUs 0-1".
func (m Machine) CacheLine() string {
	if len(m.Caches) == 0 {
		return "unknown"
	}
	var parts []string
	for _, c := range m.Caches {
		who := "per vCPU"
		if c.SharedBy != "" {
			who = "shared by CPUs " + c.SharedBy
			if c.Instances > 1 {
				who += fmt.Sprintf(" (%d instances)", c.Instances)
			}
		} else if c.Instances > 0 && c.Instances < m.VCPUs {
			who = fmt.Sprintf("%d instances", c.Instances)
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", c.Name(), size(c.Size), who))
	}
	return strings.Join(parts, ", ")
}

// SharedCache names the largest cache the vCPUs share ("L3"), or "none".
// Where none is shared, a cache line written by one vCPU and read by
// another travels through memory or the interconnect.
func (m Machine) SharedCache() string {
	shared := "none"
	for _, c := range m.Caches {
		if c.SharedBy != "" {
			shared = c.Name() + " (CPUs " + c.SharedBy + ")"
		}
	}
	if len(m.Caches) == 0 {
		return "unknown"
	}
	return shared
}

// CounterLine says whether keyed reads the system clock through the
// timestamp counter, and what decided it.
func (m Machine) CounterLine() string {
	flags := "none of rdtscp, constant_tsc, nonstop_tsc"
	if len(m.TSCFlags) > 0 {
		flags = strings.Join(m.TSCFlags, " ")
	}
	if m.CounterClock {
		return fmt.Sprintf("on (internal/tsc: clocksource %s, %s): keyed's system clock reads the timestamp counter", m.ClockSource, flags)
	}
	return fmt.Sprintf("off (internal/tsc: clocksource %s, %s; or the admit_purego or admit_nocounter build): keyed's system clock is the runtime's monotonic clock, what time.Since reads", m.ClockSource, flags)
}

// Lines returns the description as benchfmt configuration lines, in the
// order Write prints them.
func (m Machine) Lines() [][2]string {
	threads := "unknown threads per core"
	if m.ThreadsPerCore > 0 {
		threads = fmt.Sprintf("%d thread(s) per core", m.ThreadsPerCore)
	}
	return [][2]string{
		{"machine", m.Host},
		{"cpu-model", m.CPUModel},
		{"cores", strconv.Itoa(m.VCPUs)},
		{"vcpus", fmt.Sprintf("%d, %s", m.VCPUs, threads)},
		{"caches", m.CacheLine()},
		{"shared-cache", m.SharedCache()},
		{"virtualization", m.Virtualization},
		{"kernel", m.Kernel},
		{"clocksource", m.ClockSource},
		{"counter-clock", m.CounterLine()},
	}
}

// Summary is the description in one line, for a table's heading.
func (m Machine) Summary() string {
	clock := "off"
	if m.CounterClock {
		clock = "on"
	}
	return fmt.Sprintf("%s; %d vCPUs, %s; shared cache: %s; clocksource %s; keyed's counter clock %s",
		m.CPUModel, m.VCPUs, m.Virtualization, m.SharedCache(), m.ClockSource, clock)
}
