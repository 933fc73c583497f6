//go:build !linux || !amd64 || admit_purego || admit_nocounter

package tsc

// supported is false: the counter is read only on linux/amd64, where the
// kernel says whether it is the clock's source (see the package doc), and
// not in the admit_purego build, nor in the admit_nocounter build, which
// turns the counter off and nothing else: the default build as it runs on
// a machine whose clock source is not the counter (kvm-clock), for
// measuring that machine's costs on this one.
func supported() bool { return false }
