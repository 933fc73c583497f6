package admitgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/admit-go/admit/internal/addrkey"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyByPeer returns the default key function: the address of the call's
// peer, the transport's remote end (it reads no metadata: behind a proxy
// every call would share the proxy's key, so key by a header the proxy sets
// there, with KeyByMetadata).
//
// An IPv4 address is its own key ("192.0.2.1"). An IPv6 address is keyed by
// its /64 ("2001:db8:1:2::/64"): one subscriber usually holds a whole /64.
// An IPv4-mapped IPv6 address counts as the IPv4 address it maps, as does
// a NAT64 address in RFC 6052's well-known prefix (64:ff9b::192.0.2.1), and
// a zone is dropped, as admithttp.KeyByIP does. A peer that is not an IP address (a
// Unix socket, an in-memory listener) is an error.
func KeyByPeer() func(ctx context.Context, fullMethod string) (string, error) {
	return keyByPeer
}

func keyByPeer(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", errors.New("admitgrpc: the call has no peer")
	}
	var a netip.Addr
	switch addr := p.Addr.(type) {
	case *net.TCPAddr:
		a = addr.AddrPort().Addr()
	default:
		if addrkey.Unix(addr) {
			return "", fmt.Errorf("admitgrpc: peer %s address %q is not an IP address", addr.Network(), addr.String())
		}
		ap, err := netip.ParseAddrPort(p.Addr.String())
		if err != nil {
			return "", fmt.Errorf("admitgrpc: peer %s address %q is not an IP address", p.Addr.Network(), p.Addr.String())
		}
		a = ap.Addr()
	}
	if !a.IsValid() {
		return "", fmt.Errorf("admitgrpc: peer address %q is not an IP address", p.Addr.String())
	}
	return addrkey.Of(a), nil
}

// KeyByMetadata returns a key function that keys a call by the first value
// of the named request metadata (an API key, say, or a client address that
// a trusted proxy set). A call without it, or with an empty value, is an
// error. The name is matched case-insensitively, as gRPC metadata keys are
// lower case.
func KeyByMetadata(name string) func(ctx context.Context, fullMethod string) (string, error) {
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(name)
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("admitgrpc: the call has no %s metadata", name)
		}
		return v[0], nil
	}
}
