package nilness_test

import (
	"testing"
	"unsafe"

	"github.com/admit-go/admit/internal/nilness"
)

type stringer interface{ String() string }

type ptr struct{}

func (*ptr) String() string { return "" }

type fn func() string

func (f fn) String() string { return f() }

type mp map[int]int

func (mp) String() string { return "" }

type sl []int

func (sl) String() string { return "" }

type ch chan int

func (ch) String() string { return "" }

type up unsafe.Pointer

type val struct{}

func (val) String() string { return "" }

type zero int

func (zero) String() string { return "" }

func TestIs(t *testing.T) {
	x := 1
	for _, tc := range []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil interface value", stringer(nil), true},
		{"nil pointer", (*ptr)(nil), true},
		{"nil pointer as interface", stringer((*ptr)(nil)), true},
		{"nil func", fn(nil), true},
		{"nil map", mp(nil), true},
		{"nil slice", sl(nil), true},
		{"nil chan", ch(nil), true},
		{"nil unsafe.Pointer", up(nil), true},
		{"pointer", &ptr{}, false},
		{"func", fn(func() string { return "" }), false},
		{"map", mp{}, false},
		{"slice", sl{}, false},
		{"chan", make(ch), false},
		{"unsafe.Pointer", up(unsafe.Pointer(&x)), false},
		{"struct", val{}, false},
		{"zero int", zero(0), false},
	} {
		if got := nilness.Is(tc.v); got != tc.want {
			t.Errorf("Is(%s %T) = %v, want %v", tc.name, tc.v, got, tc.want)
		}
	}
}
