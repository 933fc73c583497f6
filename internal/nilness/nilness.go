// Package nilness tells a nil option value from a usable one, for the
// constructors' checks of their options: an interface such as admit.Clock
// that holds a nil pointer ("typed nil": var c *myClock; WithClock(c)) is
// not == nil, yet a limiter that reads it panics, at New or at its first
// call. It uses reflect and is for construction only, never a hot path.
package nilness

import "reflect"

// Is reports whether v is nil or holds a nil pointer, func, map, slice,
// channel or unsafe.Pointer: a value whose methods, if they use it, fail.
// (One whose methods never touch their receiver would work; a constructor
// refuses it too, as it refuses a nil interface, since nothing tells the
// two apart and an unset pointer is by far the likelier.)
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
