// Package addrkey implements the rate-limit key of a client's IP address,
// shared by admithttp.KeyByIP and admitgrpc.KeyByPeer so that one client
// has one key whichever front end it calls.
package addrkey

import "net/netip"

// Of returns the key of a valid address a. An IPv4 address is its own key
// ("192.0.2.1"). An IPv6 address is keyed by its /64 ("2001:db8:1:2::/64"):
// one subscriber usually holds a whole /64, so keying single IPv6
// addresses would give each client 2^64 buckets. An IPv4-mapped IPv6
// address (::ffff:192.0.2.1, what a dual-stack listener reports for an IPv4
// peer) is keyed as the IPv4 address it maps, and a zone is dropped.
func Of(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64) // cannot fail: a is a valid IPv6 address
	return p.String()
}
