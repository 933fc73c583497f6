package admithttp_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/admithttp"
)

func request(remote string, xff ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	return r
}

func TestKeyByIP(t *testing.T) {
	cases := []struct {
		remote, key string
	}{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::/64"}, // same /64, same key
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"[2001:db8:1:3::1]", "2001:db8:1:3::/64"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"}, // IPv4-mapped counts as IPv4
		{"[fe80::1%eth0]:80", "fe80::/64"},     // zone dropped
		{"fe80::1%eth1", "fe80::/64"},
		{"[::1]:80", "::/64"},
		{"127.0.0.1:0", "127.0.0.1"},
		// NAT64 (RFC 6052's well-known prefix 64:ff9b::/96): each IPv4
		// client seen through a translator has its own key, its address.
		{"[64:ff9b::192.0.2.1]:80", "192.0.2.1"},
		{"[64:ff9b::198.51.100.7]:80", "198.51.100.7"},
		{"64:ff9b::c000:201", "192.0.2.1"},
	}
	for _, c := range cases {
		// A forwarding header must change nothing.
		got, err := admithttp.KeyByIP(request(c.remote, "203.0.113.9"))
		if err != nil || got != c.key {
			t.Errorf("KeyByIP(%q) = %q, %v; want %q", c.remote, got, err, c.key)
		}
	}
	for _, bad := range []string{"", "@", "localhost:80", "192.0.2.1:", "192.0.2.1:http", "192.0.2.1:65536",
		"[192.0.2.1]:80", "[192.0.2.1]", "2001:db8::1:80x", "[2001:db8::1", "01.2.3.4:80", "fe80::1%"} {
		if got, err := admithttp.KeyByIP(request(bad)); err == nil {
			t.Errorf("KeyByIP(%q) = %q, nil; want an error", bad, got)
		}
	}
}

func TestKeyByHeader(t *testing.T) {
	f := admithttp.KeyByHeader("x-api-key") // any case
	r := request("192.0.2.1:1")
	if got, err := f(r); err == nil {
		t.Errorf("no header: got %q, nil; want an error", got)
	}
	r.Header.Set("X-Api-Key", "")
	if got, err := f(r); err == nil {
		t.Errorf("empty header: got %q, nil; want an error", got)
	}
	r.Header.Set("X-API-Key", "k1")
	r.Header.Add("X-API-Key", "k2")
	if got, err := f(r); err != nil || got != "k1" {
		t.Errorf("got %q, %v; want the first line, k1", got, err)
	}
}

func mustPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func TestKeyByForwardedFor(t *testing.T) {
	f := admithttp.KeyByForwardedFor(mustPrefixes(t, "10.0.0.0/8", "2001:db8:ff::/48", "::ffff:172.16.0.0/108")...)
	cases := []struct {
		name   string
		remote string
		xff    []string
		key    string // "" means an error
	}{
		{"untrusted peer ignores the header", "192.0.2.1:5", []string{"203.0.113.7"}, "192.0.2.1"},
		{"untrusted peer, garbage header", "192.0.2.1:5", []string{"garbage"}, "192.0.2.1"},
		{"trusted peer, one hop", "10.0.0.1:5", []string{"203.0.113.7"}, "203.0.113.7"},
		{"spoofed leftmost entries are never read", "10.0.0.1:5", []string{"1.1.1.1, 6.6.6.6, 203.0.113.7"}, "203.0.113.7"},
		{"garbage left of the client is never read", "10.0.0.1:5", []string{"garbage, 203.0.113.7"}, "203.0.113.7"},
		{"chain of trusted proxies", "10.0.0.1:5", []string{"203.0.113.7, 10.1.1.1, 10.2.2.2"}, "203.0.113.7"},
		{"several field lines are one list", "10.0.0.1:5", []string{"6.6.6.6, 203.0.113.7", "10.1.1.1"}, "203.0.113.7"},
		{"the last line is read first", "10.0.0.1:5", []string{"203.0.113.7", "198.51.100.3"}, "198.51.100.3"},
		{"empty elements are skipped", "10.0.0.1:5", []string{"203.0.113.7, ,", ""}, "203.0.113.7"},
		{"ports", "10.0.0.1:5", []string{"203.0.113.7:4711, 10.1.1.1:80"}, "203.0.113.7"},
		{"IPv6 with brackets and port", "10.0.0.1:5", []string{"[2001:db8:1:2::99]:443"}, "2001:db8:1:2::/64"},
		{"IPv6 bare", "10.0.0.1:5", []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"IPv6 zone dropped", "10.0.0.1:5", []string{"fe80::1%eth0"}, "fe80::/64"},
		{"trusted IPv6 proxy", "[2001:db8:ff:1::1]:5", []string{"198.51.100.3, 2001:db8:ff::2"}, "198.51.100.3"},
		{"mapped proxy address is trusted as IPv4", "[::ffff:10.0.0.1]:5", []string{"198.51.100.3, ::ffff:10.9.9.9"}, "198.51.100.3"},
		{"mapped trusted prefix", "172.16.0.9:5", []string{"198.51.100.3"}, "198.51.100.3"},
		{"mapped prefix covers only its /12", "172.32.0.9:5", []string{"198.51.100.3"}, "172.32.0.9"},
		{"mapped client is keyed as IPv4", "10.0.0.1:5", []string{"::ffff:198.51.100.3"}, "198.51.100.3"},
		{"NAT64 client is keyed as its IPv4 address", "10.0.0.1:5", []string{"[64:ff9b::198.51.100.3]:7"}, "198.51.100.3"},
		{"NAT64 peer is matched as written, not as IPv4", "[64:ff9b::10.0.0.1]:5", []string{"198.51.100.3"}, "10.0.0.1"},
		{"all trusted: the leftmost", "10.0.0.1:5", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{"no header from a trusted peer: the peer", "10.0.0.1:5", nil, "10.0.0.1"},
		{"garbage written by a trusted proxy", "10.0.0.1:5", []string{"203.0.113.7, unknown"}, ""},
		{"obfuscated identifier", "10.0.0.1:5", []string{"_hidden"}, ""},
		{"bracketed IPv4", "10.0.0.1:5", []string{"[203.0.113.7]"}, ""},
		{"bad RemoteAddr", "nonsense", []string{"203.0.113.7"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := f(request(c.remote, c.xff...))
			if c.key == "" {
				if err == nil {
					t.Fatalf("got %q, nil; want an error", got)
				}
				return
			}
			if err != nil || got != c.key {
				t.Fatalf("got %q, %v; want %q", got, err, c.key)
			}
		})
	}
}

// TestKeyByForwardedForInvalidPrefix: the zero prefix, and a /0 of either
// family (trusting every hop would make the client-written leftmost entry
// the key), are configuration errors; a /1 is the operator's choice.
func TestKeyByForwardedForInvalidPrefix(t *testing.T) {
	for _, p := range []netip.Prefix{{}, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("::ffff:0.0.0.0/96"), netip.MustParsePrefix("10.0.0.0/0")} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for trusted prefix %v", p)
				}
			}()
			admithttp.KeyByForwardedFor(netip.MustParsePrefix("10.0.0.0/8"), p)
		}()
	}
	f := admithttp.KeyByForwardedFor(netip.MustParsePrefix("0.0.0.0/1"))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1234"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 10.0.0.2")
	if got, err := f(r); err != nil || got != "203.0.113.9" {
		t.Errorf("0.0.0.0/1 trusted: %q, %v; want the first untrusted entry from the right, 203.0.113.9", got, err)
	}
}

// The oracle below decides the same questions with package net's types
// (net.IP, net.IPNet.Contains, net.IPMask), its own list splitting and its
// own reading of the entry grammar (ports, brackets, zones), so that a bug
// in which hop is chosen, how it is matched or how it is keyed cannot pass
// unnoticed. IPv4 literals are parsed by hand; only the parse of an IPv6
// literal is shared, since net.ParseIP calls netip.ParseAddr.

func oracleHop(s string) (net.IP, bool) {
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return nil, false
		}
		if p, err := strconv.ParseUint(port, 10, 64); err != nil || p > 65535 {
			return nil, false
		}
		if strings.HasPrefix(s, "[") != strings.Contains(h, ":") {
			return nil, false // brackets if and only if IPv6
		}
		host = h
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
		if !strings.Contains(host, ":") {
			return nil, false
		}
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == len(host)-1 || !strings.Contains(host[:i], ":") {
			return nil, false // an empty zone, or a zone on IPv4
		}
		host = host[:i]
	}
	if !strings.Contains(host, ":") {
		return oracleIPv4(host)
	}
	ip := net.ParseIP(host)
	return ip, ip != nil
}

// oracleIPv4 parses a dotted quad by hand: four decimal fields of 1 to 3
// digits, at most 255, without leading zeros.
func oracleIPv4(s string) (net.IP, bool) {
	fields := strings.Split(s, ".")
	if len(fields) != 4 {
		return nil, false
	}
	var b [4]byte
	for i, f := range fields {
		if f == "" || len(f) > 3 || strings.Trim(f, "0123456789") != "" || (len(f) > 1 && f[0] == '0') {
			return nil, false
		}
		v, _ := strconv.Atoi(f)
		if v > 255 {
			return nil, false
		}
		b[i] = byte(v)
	}
	return net.IPv4(b[0], b[1], b[2], b[3]), true
}

// oracleNAT64 is RFC 6052's well-known prefix.
var _, oracleNAT64, _ = net.ParseCIDR("64:ff9b::/96")

func oracleKey(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	if oracleNAT64.Contains(ip) {
		return net.IPv4(ip[12], ip[13], ip[14], ip[15]).String()
	}
	m := net.CIDRMask(64, 128)
	return (&net.IPNet{IP: ip.Mask(m), Mask: m}).String()
}

func oracleForwardedFor(trusted []*net.IPNet, remote string, lines []string) (string, bool) {
	isTrusted := func(ip net.IP) bool {
		for _, n := range trusted {
			if n.Contains(ip) {
				return true
			}
		}
		return false
	}
	peer, ok := oracleHop(remote)
	if !ok {
		return "", false
	}
	if !isTrusted(peer) {
		return oracleKey(peer), true
	}
	var entries []string
	for _, e := range strings.Split(strings.Join(lines, ","), ",") {
		if e = strings.Trim(e, " \t"); e != "" {
			entries = append(entries, e)
		}
	}
	client := peer
	for i := len(entries) - 1; i >= 0; i-- {
		ip, ok := oracleHop(entries[i])
		if !ok {
			return "", false
		}
		if !isTrusted(ip) {
			return oracleKey(ip), true
		}
		client = ip
	}
	return oracleKey(client), true
}

var fuzzTrusted = []string{"10.0.0.0/8", "127.0.0.0/8", "2001:db8::/32", "::ffff:192.168.0.0/112"}

func FuzzKeyByForwardedFor(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 10.0.0.2", "", uint8(1))
	f.Add("127.0.0.1:80", "6.6.6.6,1.2.3.4", "192.168.1.1", uint8(2))
	f.Add("[2001:db8::1]:80", "[2001:db8:0:1::5]:1,::ffff:10.1.2.3", "fe80::1%eth0", uint8(2))
	f.Add("192.0.2.1:80", "10.0.0.1", "", uint8(1))
	f.Add("[::ffff:10.0.0.1]:80", "garbage, 10.2.3.4:99", "", uint8(1))
	f.Add("10.0.0.1:80", " , ,\t", "1.2.3.4%x", uint8(2))
	f.Add("10.0.0.1", "[1.2.3.4]:5,[::1]", "::ffff:192.168.0.1", uint8(2))
	f.Add("[64:ff9b::10.0.0.1]:80", "64:ff9b::1.2.3.4", "", uint8(1))
	f.Add("10.0.0.1:80", "[64:ff9b::c633:6407]:9", "", uint8(1))
	key := admithttp.KeyByForwardedFor(mustPrefixes(f, fuzzTrusted...)...)
	var nets []*net.IPNet
	for _, s := range fuzzTrusted {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			f.Fatal(err)
		}
		nets = append(nets, n)
	}
	f.Fuzz(func(t *testing.T, remote, xff1, xff2 string, lines uint8) {
		var xff []string
		switch lines % 3 {
		case 1:
			xff = []string{xff1}
		case 2:
			xff = []string{xff1, xff2}
		}
		r := request(remote)
		r.Header["X-Forwarded-For"] = xff // raw, as a client could send them
		got, err := key(r)
		want, ok := oracleForwardedFor(nets, remote, xff)
		switch {
		case !ok && err == nil:
			t.Fatalf("RemoteAddr %q, XFF %q: key %q, but no hop is vouched for", remote, xff, got)
		case ok && err != nil:
			t.Fatalf("RemoteAddr %q, XFF %q: error %v, want key %q", remote, xff, err, want)
		case ok && got != want:
			t.Fatalf("RemoteAddr %q, XFF %q: key %q, want %q (the vouched-for hop)", remote, xff, got, want)
		}
	})
}

func FuzzKeyByIP(f *testing.F) {
	for _, s := range []string{"192.0.2.1:80", "[2001:db8::1]:80", "[::ffff:1.2.3.4]:1", "fe80::1%x", "1.2.3.4", "[1.2.3.4]:1", "", "[64:ff9b::1.2.3.4]:1", "64:ff9b::1:0:0"} {
		f.Add(s, "9.9.9.9")
	}
	noTrust := admithttp.KeyByForwardedFor()
	f.Fuzz(func(t *testing.T, remote, xff string) {
		r := request(remote)
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("X-Real-Ip", xff)
		got, err := admithttp.KeyByIP(r)
		// With nothing trusted, KeyByForwardedFor is KeyByIP.
		if got2, err2 := noTrust(r); got2 != got || (err2 == nil) != (err == nil) {
			t.Fatalf("RemoteAddr %q: KeyByForwardedFor() = %q, %v; KeyByIP = %q, %v", remote, got2, err2, got, err)
		}
		ip, ok := oracleHop(remote)
		switch {
		case !ok && err == nil:
			t.Fatalf("KeyByIP(%q) = %q, nil; the address does not parse", remote, got)
		case ok && err != nil:
			t.Fatalf("KeyByIP(%q): %v; want %q", remote, err, oracleKey(ip))
		case ok && got != oracleKey(ip):
			t.Fatalf("KeyByIP(%q) = %q, want %q", remote, got, oracleKey(ip))
		}
	})
}

func FuzzKeyByHeader(f *testing.F) {
	f.Add("k1", "k2", uint8(2))
	f.Add("", "k2", uint8(2))
	f.Add("x", "", uint8(0))
	key := admithttp.KeyByHeader("x-api-key")
	f.Fuzz(func(t *testing.T, v1, v2 string, lines uint8) {
		r := request("192.0.2.1:1")
		vals := []string{v1, v2}[:lines%3]
		if len(vals) > 0 {
			r.Header["X-Api-Key"] = vals
		}
		got, err := key(r)
		switch {
		case len(vals) == 0 || vals[0] == "":
			if err == nil {
				t.Fatalf("lines %q: key %q, want an error", vals, got)
			}
		case err != nil || got != vals[0]:
			t.Fatalf("lines %q: %q, %v; want the first line", vals, got, err)
		}
	})
}

// A client of a server on a Unix socket may bind its own socket to any
// path, "192.0.2.77:1" say, which net/http then reports as r.RemoteAddr:
// KeyByIP and KeyByForwardedFor must not key it as the IP address it looks
// like (the doc: on a Unix socket they answer every request 400), or each
// such client chooses its key, and one named like a trusted proxy has its
// X-Forwarded-For believed.
func TestKeyUnixPeerNotAnIP(t *testing.T) {
	t.Chdir(t.TempDir()) // the bound name is a path relative to it
	ln, err := net.Listen("unix", "srv.sock")
	require.NoError(t, err)
	keys := map[string]func(*http.Request) (string, error){
		"KeyByIP":           admithttp.KeyByIP,
		"KeyByForwardedFor": admithttp.KeyByForwardedFor(netip.MustParsePrefix("10.0.0.0/8")),
	}
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := keys[r.URL.Path[1:]](r)
		got <- fmt.Sprintf("RemoteAddr %q: key %q, error %v", r.RemoteAddr, k, err)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	for name, bound := range map[string]string{"KeyByIP": "192.0.2.77:1", "KeyByForwardedFor": "10.0.0.1:1"} {
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return net.DialUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"}, &net.UnixAddr{Name: "srv.sock", Net: "unix"})
		}}}
		req, err := http.NewRequest(http.MethodGet, "http://unix/"+name, nil)
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		client.CloseIdleConnections()
		line := <-got
		require.Contains(t, line, `key "", error`, "%s: %s", name, line)
	}
}
