package admitgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/admit-go/admit/admitgrpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestKeyByPeer(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	cases := []struct {
		addr net.Addr
		key  string // "" means an error
	}{
		{tcp("192.0.2.1:1234"), "192.0.2.1"},
		{tcp("[2001:db8:1:2:3:4:5:6]:443"), "2001:db8:1:2::/64"},
		{tcp("[2001:db8:1:2:ffff::1]:443"), "2001:db8:1:2::/64"}, // same /64, same key
		{tcp("[::ffff:192.0.2.1]:80"), "192.0.2.1"},              // IPv4-mapped counts as IPv4
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"}, "fe80::/64"},
		{tcp("[64:ff9b::192.0.2.1]:80"), "192.0.2.1"}, // NAT64: the IPv4 address it embeds
		{tcp("[64:ff9b::198.51.100.7]:80"), "198.51.100.7"},
		{&net.UDPAddr{IP: net.ParseIP("198.51.100.7"), Port: 9}, "198.51.100.7"}, // any host:port form
		{&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		ctx := context.Background()
		if c.addr != nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: c.addr})
		}
		got, err := admitgrpc.KeyByPeer()(ctx, "/svc/M")
		if c.key == "" {
			if err == nil {
				t.Errorf("%v: got %q, nil; want an error", c.addr, got)
			}
			continue
		}
		if err != nil || got != c.key {
			t.Errorf("%v: got %q, %v; want %q", c.addr, got, err, c.key)
		}
	}
}

func TestKeyByMetadata(t *testing.T) {
	f := admitgrpc.KeyByMetadata("X-API-Key") // any case
	for _, md := range []metadata.MD{nil, {}, metadata.Pairs("x-api-key", "")} {
		ctx := metadata.NewIncomingContext(context.Background(), md)
		if got, err := f(ctx, "/svc/M"); err == nil {
			t.Errorf("metadata %v: got %q, nil; want an error", md, got)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1", "x-api-key", "k2"))
	if got, err := f(ctx, "/svc/M"); err != nil || got != "k1" {
		t.Errorf("got %q, %v; want the first value, k1", got, err)
	}
}
