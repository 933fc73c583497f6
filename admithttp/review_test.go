package admithttp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admithttp"
)

// A HEAD request over HTTP/2 whose handler writes its headers before it
// returns (a GET handler serving more than the server's 4 KiB write buffer,
// or one that flushes) is answered with END_STREAM at once, and the server
// then cancels the request's context while the handler still runs: no
// client gave up and no deadline passed, and the response was a 200. Such a
// request must end its permit a Success, as it does over HTTP/1.1.
func TestReviewHeadOverHTTP2(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			l, err := adaptive.New(adaptive.WithInitialLimit(4))
			require.NoError(t, err)
			body := strings.Repeat("x", 64<<10)
			h := admithttp.Concurrency(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					time.Sleep(100 * time.Millisecond) // the client gives up first
				}
				w.Header().Set("Content-Type", "text/plain")
				if r.URL.Path == "/flush" {
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
				} else {
					_, _ = io.WriteString(w, body)
				}
				time.Sleep(20 * time.Millisecond) // work after the response's headers went out
			}))
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = proto == "HTTP/2.0"
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			for _, tc := range []struct{ method, path string }{
				{http.MethodGet, "/"}, {http.MethodHead, "/"}, {http.MethodGet, "/flush"}, {http.MethodHead, "/flush"},
			} {
				method := tc.method
				before := l.Stats()
				req, err := http.NewRequest(method, srv.URL+tc.path, nil)
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(t, proto, resp.Proto)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Eventually(t, func() bool { return l.InFlight() == 0 }, 5*time.Second, time.Millisecond)
				after := l.Stats()
				require.Equal(t, before.Drops, after.Drops, "%s %s: a 200 with the client still there is Dropped", proto, method)
				require.Equal(t, before.Successes+1, after.Successes, "%s %s", proto, method)
			}
			// A HEAD request whose client gave up before the headers
			// went out is still a loss.
			before := l.Stats()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, srv.URL+"/slow", nil)
			require.NoError(t, err)
			_, err = client.Do(req)
			require.Error(t, err)
			require.Eventually(t, func() bool { return l.InFlight() == 0 && l.Stats().Drops == before.Drops+1 }, 5*time.Second, time.Millisecond)
			require.Equal(t, before.Successes, l.Stats().Successes)
		})
	}
}

// A client of a server on a Unix socket may bind its own socket to any
// path, "192.0.2.77:1" say, which net/http then reports as r.RemoteAddr:
// KeyByIP and KeyByForwardedFor must not key it as the IP address it looks
// like (the doc: on a Unix socket they answer every request 400), or each
// such client chooses its key, and one named like a trusted proxy has its
// X-Forwarded-For believed.
func TestReviewUnixPeerNotAnIP(t *testing.T) {
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
