package provenance

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tree builds a /proc and /sys tree: cpuinfo's first processor, and for
// each CPU its caches as (level, type, size, shared_cpu_list) and its
// thread siblings.
func tree(cpuinfo, clocksource string, siblings []string, caches [][][4]string) fstest.MapFS {
	fsys := fstest.MapFS{
		"proc/cpuinfo":              {Data: []byte(cpuinfo)},
		"proc/sys/kernel/osrelease": {Data: []byte("6.1.0\n")},
		"sys/devices/system/clocksource/clocksource0/current_clocksource": {Data: []byte(clocksource + "\n")},
	}
	for cpu, cs := range caches {
		dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d", cpu)
		fsys[dir+"/topology/thread_siblings_list"] = &fstest.MapFile{Data: []byte(siblings[cpu] + "\n")}
		for i, c := range cs {
			idx := fmt.Sprintf("%s/cache/index%d/", dir, i)
			fsys[idx+"level"] = &fstest.MapFile{Data: []byte(c[0] + "\n")}
			fsys[idx+"type"] = &fstest.MapFile{Data: []byte(c[1] + "\n")}
			fsys[idx+"size"] = &fstest.MapFile{Data: []byte(c[2] + "\n")}
			fsys[idx+"shared_cpu_list"] = &fstest.MapFile{Data: []byte(c[3] + "\n")}
		}
	}
	return fsys
}

const intel = `processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 167
model name	: Intel(R) Xeon(R) Processor
stepping	: 1
flags		: fpu tsc rdtscp constant_tsc nonstop_tsc hypervisor avx2

processor	: 1
model name	: Something Else
`

const amd = `processor	: 0
cpu family	: 26
model		: 17
model name	: AMD EPYC Processor
stepping	: 0
flags		: fpu tsc constant_tsc hypervisor
`

func TestDescribe(t *testing.T) {
	t.Run("two vCPUs sharing an L3, counter clock", func(t *testing.T) {
		var caches [][][4]string
		for cpu := range 2 {
			self := fmt.Sprint(cpu)
			caches = append(caches, [][4]string{{"1", "Data", "48K", self}, {"1", "Instruction", "64K", self}, {"2", "Unified", "2048K", self}, {"3", "Unified", "491520K", "0-1"}})
		}
		m := describe(tree(intel, "tsc", []string{"0", "1"}, caches), 2)
		m.CounterClock = true
		assert.Equal(t, "Intel(R) Xeon(R) Processor (family 6 model 167 stepping 1)", m.CPUModel)
		assert.Equal(t, 1, m.ThreadsPerCore)
		assert.Equal(t, "a guest (hypervisor unknown)", m.Virtualization, "the flag says a guest; lscpu names the vendor in Describe")
		assert.Equal(t, []string{"rdtscp", "constant_tsc", "nonstop_tsc"}, m.TSCFlags)
		assert.Equal(t, "L1d 48 KiB per vCPU, L1i 64 KiB per vCPU, L2 2 MiB per vCPU, L3 480 MiB shared by CPUs 0-1", m.CacheLine())
		assert.Equal(t, "L3 (CPUs 0-1)", m.SharedCache())
		assert.Equal(t, "tsc", m.ClockSource)
		assert.Equal(t, "6.1.0", m.Kernel)
		assert.Contains(t, m.CounterLine(), "on (internal/tsc: clocksource tsc, rdtscp constant_tsc nonstop_tsc)")
		assert.Contains(t, m.Summary(), "shared cache: L3 (CPUs 0-1); clocksource tsc; keyed's counter clock on")
	})
	t.Run("two vCPUs sharing no cache, kvm-clock, no RDTSCP", func(t *testing.T) {
		var caches [][][4]string
		for cpu := range 2 {
			self := fmt.Sprint(cpu)
			caches = append(caches, [][4]string{{"1", "Data", "48K", self}, {"2", "Unified", "1024K", self}, {"3", "Unified", "32768K", self}})
		}
		m := describe(tree(amd, "kvm-clock", []string{"0", "1"}, caches), 2)
		assert.Equal(t, "AMD EPYC Processor (family 26 model 17 stepping 0)", m.CPUModel)
		assert.Equal(t, "L1d 48 KiB per vCPU, L2 1 MiB per vCPU, L3 32 MiB per vCPU", m.CacheLine())
		assert.Equal(t, "none", m.SharedCache())
		assert.Equal(t, []string{"constant_tsc"}, m.TSCFlags)
		assert.Contains(t, m.CounterLine(), "off (internal/tsc: clocksource kvm-clock, constant_tsc;")
		assert.Contains(t, m.Summary(), "keyed's counter clock off")
	})
	t.Run("SMT: two threads per core share L1 and L2, one L3 per four", func(t *testing.T) {
		var caches [][][4]string
		var siblings []string
		for cpu := range 8 {
			core := fmt.Sprintf("%d-%d", cpu&^1, cpu|1)
			ccx := fmt.Sprintf("%d-%d", cpu&^3, cpu|3)
			siblings = append(siblings, core)
			caches = append(caches, [][4]string{{"1", "Data", "32K", core}, {"2", "Unified", "512K", core}, {"3", "Unified", "16384K", ccx}})
		}
		m := describe(tree(intel, "tsc", siblings, caches), 8)
		assert.Equal(t, 2, m.ThreadsPerCore)
		assert.Equal(t, "L1d 32 KiB shared by CPUs 0-1 (4 instances), L2 512 KiB shared by CPUs 0-1 (4 instances), L3 16 MiB shared by CPUs 0-3 (2 instances)", m.CacheLine())
		assert.Equal(t, "L3 (CPUs 0-3)", m.SharedCache(), "the largest shared level")
	})
	t.Run("nothing readable", func(t *testing.T) {
		m := describe(fstest.MapFS{}, 4)
		assert.Equal(t, "unknown", m.CacheLine())
		assert.Equal(t, "unknown", m.SharedCache())
		assert.Equal(t, "unknown", m.ClockSource)
		assert.Equal(t, "unknown", m.Virtualization)
		assert.Equal(t, 4, m.VCPUs)
	})
}

// TestLines checks that every line is a benchfmt configuration line (a
// lower-case key without spaces), so that benchstat carries them into its
// tables, and that the keys the plots read are there.
func TestLines(t *testing.T) {
	m := describe(tree(amd, "kvm-clock", []string{"0"}, [][][4]string{{{"1", "Data", "48K", "0"}}}), 1)
	keys := map[string]bool{}
	for _, kv := range m.Lines() {
		require.NotEmpty(t, kv[0])
		assert.Equal(t, strings.ToLower(kv[0]), kv[0])
		assert.NotContains(t, kv[0], " ")
		assert.NotContains(t, kv[1], "\n")
		keys[kv[0]] = true
	}
	for _, k := range []string{"cpu-model", "cores", "vcpus", "caches", "shared-cache", "clocksource", "counter-clock"} {
		assert.True(t, keys[k], k)
	}
}

func TestCPUList(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2, 3, 8}, cpuList("0-3,8"))
	assert.Equal(t, []int{5}, cpuList("5"))
	assert.Nil(t, cpuList(""))
	assert.Nil(t, cpuList("3-1"))
	assert.Nil(t, cpuList("x"))
}
