// Package addrkey implements the rate-limit key of a client's IP address,
// shared by admithttp.KeyByIP and admitgrpc.KeyByPeer so that one client
// has one key whichever front end it calls.
package addrkey

import (
	"net"
	"net/netip"
	"strings"
)

// nat64 is RFC 6052's well-known prefix, 64:ff9b::/96: a translator shows
// the IPv4 host a.b.c.d to IPv6 peers as 64:ff9b::a.b.c.d.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Of returns the key of a valid address a. An IPv4 address is its own key
// ("192.0.2.1"). An IPv6 address is keyed by its /64 ("2001:db8:1:2::/64"):
// one subscriber usually holds a whole /64, so keying single IPv6
// addresses would give each client 2^64 buckets. Two kinds of IPv6 address
// stand for one IPv4 host and are keyed as that IPv4 address: an
// IPv4-mapped address (::ffff:192.0.2.1, what a dual-stack listener reports
// for an IPv4 peer), and an address in RFC 6052's well-known NAT64 prefix
// (64:ff9b::192.0.2.1, what a translator in front of an IPv6-only server
// shows for an IPv4 client; by its /64 every IPv4 client would share one
// key). A zone is dropped.
func Of(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	if nat64.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:])).String()
	}
	p, _ := a.Prefix(64) // cannot fail: a is a valid IPv6 address
	return p.String()
}

// Unix reports whether a is a Unix socket's address (network unix or
// unixpacket, whatever its type). A peer's such address is the path the
// client bound its socket to, if any: a name the client chooses,
// "192.0.2.1:80" as well as any other, never an IP address to key by.
func Unix(a net.Addr) bool { return a != nil && strings.HasPrefix(a.Network(), "unix") }
