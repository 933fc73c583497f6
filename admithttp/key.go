package admithttp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/admit-go/admit/internal/addrkey"
)

// KeyByIP keys a request by its peer's address, r.RemoteAddr, as set by
// net/http ("host:port"; a bare address is accepted too). It reads no header:
// behind a proxy every request would share the proxy's key, so use
// KeyByForwardedFor there.
//
// An IPv4 address is its own key ("192.0.2.1"). An IPv6 address is keyed by
// its /64 ("2001:db8:1:2::/64"): one subscriber usually holds a whole /64, so
// keying single IPv6 addresses would give each client 2^64 buckets. An
// IPv4-mapped IPv6 address (::ffff:192.0.2.1, what a dual-stack listener
// reports for an IPv4 peer) counts as the IPv4 address it maps, so one client
// has one key whichever socket family accepted it; so does an address in
// RFC 6052's well-known NAT64 prefix (64:ff9b::192.0.2.1, how a translator
// in front of an IPv6-only server shows an IPv4 client), which by its /64
// would give every IPv4 client one shared key. A zone (fe80::1%eth0) is
// dropped. An address that does not parse is an error.
func KeyByIP(r *http.Request) (string, error) {
	if overUnix(r) {
		return "", fmt.Errorf("admithttp: RemoteAddr %q: %w", r.RemoteAddr, errUnixPeer)
	}
	// Fast path: an IPv4 "host:port" is keyed by its host substring, with
	// no allocation. ParseAddrPort accepts only the dotted-quad form without
	// leading zeros, which is exactly Addr.String's output.
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ap.Addr().Is4() {
		return r.RemoteAddr[:strings.LastIndexByte(r.RemoteAddr, ':')], nil
	}
	a, err := parseHop(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("admithttp: RemoteAddr %q: %w", r.RemoteAddr, err)
	}
	return addrkey.Of(a), nil
}

// KeyByHeader keys a request by the value of the named header, for a key
// the client is meant to choose (an API key, say) or one set by a trusted
// proxy. A request without the header, or with an empty value, is an error.
// Only the first field line counts; the value is used as it is.
func KeyByHeader(name string) func(*http.Request) (string, error) {
	canon := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header[canon]
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("admithttp: request has no %s header", canon)
		}
		return v[0], nil
	}
}

// KeyByForwardedFor keys a request by the client address that the trusted
// proxies in front of the server vouch for, for servers behind load balancers
// or reverse proxies that append their peer's address to X-Forwarded-For.
//
// If the peer (r.RemoteAddr) is not in a trusted prefix, the peer is the
// client and X-Forwarded-For is ignored: anyone can write it. Otherwise the
// list is read from the right (several X-Forwarded-For field lines are one
// list, in order): each trusted address vouches for the entry to its left,
// and the first address not in a trusted prefix is the client. If every entry
// is trusted, the leftmost is the client (an internal caller); with no entry,
// the peer is. A client can therefore choose nothing but entries to the left
// of the one a trusted proxy wrote, which are never read.
//
// Entries may carry a port ("192.0.2.1:443", "[2001:db8::1]:443"), brackets
// without a port, and zones, which are dropped; empty list elements are
// skipped (RFC 9110, section 5.6.1). Reading reaches an entry that is not an
// address ("unknown", an obfuscated RFC 7239 identifier, garbage) only when a
// trusted proxy passed it on, so that is an error rather than a guess.
// Addresses are keyed as by KeyByIP and unmapped (::ffff:10.0.0.1 is 10.0.0.1)
// before they are matched; a trusted IPv4-mapped prefix of /96 or longer is
// read as the IPv4 prefix it maps. A NAT64 address (64:ff9b::10.0.0.1) is
// keyed as its IPv4 address but matched as it is written: a translator
// stands between it and the IPv4 host, so only a trusted prefix inside
// 64:ff9b::/96 vouches for it, never an IPv4 one.
//
// With no trusted prefix it is KeyByIP. It panics if a prefix is not valid
// (the zero netip.Prefix, say), or if it is a /0, which trusts every
// address of its family (0.0.0.0/0, ::/0, ::ffff:0.0.0.0/96): every entry
// would be vouched for, so the leftmost, which the client writes, would be
// its key, a fresh bucket per request. The trusted set is configuration,
// not request data.
//
// A server listening on a Unix socket has no peer address (RemoteAddr is
// "@", empty, or the path a client bound its socket to, which it may name
// like an address): there KeyByIP and KeyByForwardedFor answer every
// request 400, knowing the socket from the request context's
// http.LocalAddrContextKey. Key it with KeyByHeader on a header that the proxy in front sets
// and overwrites, or with a function of your own.
func KeyByForwardedFor(trusted ...netip.Prefix) func(*http.Request) (string, error) {
	ts := make([]netip.Prefix, 0, len(trusted))
	for _, p := range trusted {
		if !p.IsValid() {
			panic(fmt.Sprintf("admithttp: KeyByForwardedFor: invalid trusted prefix %v", p))
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if p.Bits() == 0 {
			panic(fmt.Sprintf("admithttp: KeyByForwardedFor: trusted prefix %v trusts every address, so every client could choose its key", p))
		}
		ts = append(ts, p.Masked())
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range ts {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		if overUnix(r) {
			return "", fmt.Errorf("admithttp: RemoteAddr %q: %w", r.RemoteAddr, errUnixPeer)
		}
		peer, err := parseHop(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("admithttp: RemoteAddr %q: %w", r.RemoteAddr, err)
		}
		if !isTrusted(peer) {
			return addrkey.Of(peer), nil
		}
		client := peer
		lines := r.Header["X-Forwarded-For"]
		for i := len(lines) - 1; i >= 0; i-- {
			rest := lines[i]
			for rest != "" {
				var entry string
				if j := strings.LastIndexByte(rest, ','); j >= 0 {
					entry, rest = rest[j+1:], rest[:j]
				} else {
					entry, rest = rest, ""
				}
				entry = strings.Trim(entry, " \t")
				if entry == "" {
					continue
				}
				a, err := parseHop(entry)
				if err != nil {
					return "", fmt.Errorf("admithttp: X-Forwarded-For entry %q, vouched for by a trusted proxy: %w", entry, err)
				}
				if !isTrusted(a) {
					return addrkey.Of(a), nil
				}
				client = a
			}
		}
		return addrkey.Of(client), nil
	}
}

var (
	errNotAddr  = errors.New("not an IP address")
	errUnixPeer = errors.New("a Unix socket's peer, not an IP address")
)

// overUnix reports whether r came in on a Unix socket (net/http puts the
// listener's address in the request's context): its RemoteAddr is then no
// address (addrkey.Unix).
func overUnix(r *http.Request) bool {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return addrkey.Unix(a)
}

// parseHop parses an address as it appears in RemoteAddr or an
// X-Forwarded-For entry: "addr", "addr:port", "[v6]", "[v6]:port", with an
// optional IPv6 zone, which is dropped. The result is unmapped.
func parseHop(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), nil
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
		if !strings.Contains(s, ":") {
			return netip.Addr{}, errNotAddr // brackets are for IPv6 only
		}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, errNotAddr
	}
	return a.WithZone("").Unmap(), nil
}
