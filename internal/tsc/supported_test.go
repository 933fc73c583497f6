package tsc

import "testing"

// TestSupported checks that Supported answers what Enable decides, in all
// builds (make test runs this package with admit_purego and admit_nocounter
// too).
func TestSupported(t *testing.T) {
	s := Supported()
	if s != supported() {
		t.Fatalf("Supported() = %v, supported() = %v", s, supported())
	}
	if got := Enable(); got != s {
		t.Fatalf("Supported() = %v but Enable() = %v", s, got)
	}
}
