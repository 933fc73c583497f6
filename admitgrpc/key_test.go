package admitgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/admit-go/admit/admitgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

// A client of a server on a Unix socket may bind its own socket to any
// path, "192.0.2.77:1" say, which the server's accept reports as the peer's
// address: KeyByPeer must not key it as the IP address it looks like (the
// doc: a Unix socket peer is an error), or each such client chooses its key.
func TestKeyByPeerUnixNotAnIP(t *testing.T) {
	t.Chdir(t.TempDir()) // the bound name is a path relative to it
	ln, err := net.Listen("unix", "srv.sock")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	var keyErr error
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		key, keyErr = admitgrpc.KeyByPeer()(ctx, info.FullMethod)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///unix", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return net.DialUnix("unix", &net.UnixAddr{Name: "192.0.2.77:1", Net: "unix"}, &net.UnixAddr{Name: "srv.sock", Net: "unix"})
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if keyErr == nil {
		t.Fatalf("a Unix socket peer bound to %q was keyed %q; want an error", "192.0.2.77:1", key)
	}
}
