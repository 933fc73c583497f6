package addrkey_test

import (
	"net/netip"
	"testing"

	"github.com/admit-go/admit/internal/addrkey"
)

func TestOf(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":                        "192.0.2.1",
		"::ffff:192.0.2.1":                 "192.0.2.1",
		"2001:db8:1:2:3:4:5:6":             "2001:db8:1:2::/64",
		"2001:db8:1:2::1":                  "2001:db8:1:2::/64",
		"fe80::1%eth0":                     "fe80::/64",
		"::1":                              "::/64",
		"2001:db8:1:2:ffff:ffff:ffff:ffff": "2001:db8:1:2::/64",
		// RFC 6052's well-known prefix: the IPv4 address it embeds.
		"64:ff9b::192.0.2.1":   "192.0.2.1",
		"64:ff9b::c633:6407":   "198.51.100.7",
		"64:ff9b::1.2.3.4%x":   "1.2.3.4",
		"64:ff9b::1:1.2.3.4":   "64:ff9b::/64", // outside the /96: an IPv6 address
		"64:ff9b:1::192.0.2.1": "64:ff9b:1::/64",
	} {
		if got := addrkey.Of(netip.MustParseAddr(in)); got != want {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
	}
}
