package tsc

// Supported reports whether Enable would read the counter in this process
// (this machine, this kernel's clocksource, this build), without starting
// anything: for the machine description every committed result carries
// (internal/provenance). It runs the checks Enable's first call runs.
func Supported() bool { return supported() }
