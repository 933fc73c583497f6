//go:build !linux || !amd64 || admit_purego

package tsc

// supported is false: the counter is read only on linux/amd64, where the
// kernel says whether it is the clock's source (see the package doc).
func supported() bool { return false }
