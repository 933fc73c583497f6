package admitgrpc_test

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/admit-go/admit/admitgrpc"
	"github.com/admit-go/admit/admithttp"
	"google.golang.org/grpc/peer"
)

// FuzzKeyByPeer checks KeyByPeer against admithttp.KeyByIP, which keys the
// same address by another path (the peer's net.TCPAddr here, the
// RemoteAddr string there): a client must have one key over HTTP and gRPC.
func FuzzKeyByPeer(f *testing.F) {
	f.Add([]byte{192, 0, 2, 1}, uint16(443), "")
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6}, uint16(80), "")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 7}, uint16(1), "")
	f.Add([]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(9), "eth0")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(0), "")
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 1}, uint16(80), "")
	f.Fuzz(func(t *testing.T, ip []byte, port uint16, zone string) {
		if len(ip) != 4 && len(ip) != 16 {
			return
		}
		addr := &net.TCPAddr{IP: net.IP(ip), Port: int(port)}
		if len(ip) == 16 {
			addr.Zone = zone
		}
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
		got, err := admitgrpc.KeyByPeer()(ctx, "/svc/M")
		if err != nil {
			t.Fatalf("KeyByPeer(%v): %v", addr, err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr.String()
		want, err := admithttp.KeyByIP(r)
		if err != nil {
			return // a zone net/netip cannot parse back: nothing to compare
		}
		if got != want {
			t.Fatalf("%v: KeyByPeer %q, admithttp.KeyByIP %q", addr, got, want)
		}
	})
}
