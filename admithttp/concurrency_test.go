package admithttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/admit-go/admit/adaptive"
	"github.com/admit-go/admit/admithttp"
)

func getStatus(t *testing.T, url string, hdr ...string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// A request beyond the limit is shed with 503 and Retry-After; the
// handler's outcomes end the permits as documented.
func TestConcurrency(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(1))
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadRequest) })
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })
	h := admithttp.Concurrency(l, admithttp.WithRetryAfterHint(1500*time.Millisecond))(mux)
	// A handler deadline: an outer middleware gives each request 20 ms.
	deadline := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			ctx, cancel := context.WithTimeout(r.Context(), 20*time.Millisecond)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(deadline)
	defer srv.Close()

	done := make(chan int)
	go func() {
		code, _ := getStatus(t, srv.URL+"/block")
		done <- code
	}()
	<-entered
	code, hdr := getStatus(t, srv.URL+"/ok")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "2", hdr.Get("Retry-After"), "1.5 s rounded up")
	close(release)
	require.Equal(t, http.StatusOK, <-done)

	before := l.Stats()
	code, _ = getStatus(t, srv.URL+"/fail")
	require.Equal(t, http.StatusBadGateway, code)
	code, _ = getStatus(t, srv.URL+"/bad")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = getStatus(t, srv.URL+"/busy")
	require.Equal(t, http.StatusTooManyRequests, code)
	code, _ = getStatus(t, srv.URL+"/ok")
	require.Equal(t, http.StatusOK, code)
	getStatus(t, srv.URL+"/slow")
	_, err = http.Post(srv.URL+"/panic", "text/plain", nil) // not retried, unlike a GET
	require.Error(t, err, "the panic aborts the response")
	require.Eventually(t, func() bool { return l.InFlight() == 0 }, time.Second, time.Millisecond)
	after := l.Stats()
	require.Equal(t, before.Drops+4, after.Drops, "502, 429, the handler deadline and the panic are drops")
	require.Equal(t, before.Successes+2, after.Successes, "400 and 200 are successes")
	require.Equal(t, uint64(1), after.Shed)
}

// A request whose client gave up while it was in flight is Dropped, as
// admitgrpc drops a cancelled call: a client timeout is how overload
// usually shows. It does not matter whether the handler noticed (and
// returned early) or went on to finish the work.
func TestConcurrencyClientGone(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(4))
	require.NoError(t, err)
	entered := make(chan struct{}, 1)
	finish := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/notice", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	})
	mux.HandleFunc("/finish", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
		<-finish // the work goes on after the client left
		_, _ = io.WriteString(w, "done")
	})
	srv := httptest.NewServer(admithttp.Concurrency(l)(mux))
	defer srv.Close()

	for i, path := range []string{"/notice", "/finish"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		<-entered
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		if path == "/finish" {
			close(finish)
		}
		require.Eventually(t, func() bool { return l.InFlight() == 0 }, 5*time.Second, time.Millisecond)
		s := l.Stats()
		require.Equal(t, uint64(i+1), s.Drops, "%s: the client left", path)
		require.Zero(t, s.Ignored+s.Successes)
	}
}

// The priority function decides who is shed first.
func TestConcurrencyPriority(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(4))
	require.NoError(t, err)
	prio := func(r *http.Request) adaptive.Priority {
		if r.Header.Get("X-Batch") != "" {
			return adaptive.Sheddable
		}
		return adaptive.High
	}
	entered, release := make(chan struct{}), make(chan struct{})
	h := admithttp.Concurrency(l, admithttp.WithRequestPriority(prio))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, prio(r), adaptive.PriorityFrom(r.Context()))
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	done := make(chan struct{})
	for range 3 {
		go func() { getStatus(t, srv.URL+"/block"); done <- struct{}{} }()
		<-entered
	}
	// Three of four permits out, High seen: Sheddable, three levels
	// below, keeps out of the last 4·3/8 (one) and is shed; High still
	// gets the fourth.
	code, _ := getStatus(t, srv.URL+"/x", "X-Batch", "1")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = getStatus(t, srv.URL+"/x")
	require.Equal(t, http.StatusOK, code)
	close(release)
	for range 3 {
		<-done
	}
}

// fullLimiter returns a limiter of limit 1 whose one permit is out until
// the test ends: every request is shed.
func fullLimiter(t *testing.T) *adaptive.Limiter {
	t.Helper()
	l, err := adaptive.New(adaptive.WithInitialLimit(1))
	require.NoError(t, err)
	p, err := l.Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(p.Ignore)
	return l
}

func TestConcurrencyShedHandler(t *testing.T) {
	l := fullLimiter(t)
	h := admithttp.Concurrency(l, admithttp.WithShedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	})))(http.NotFoundHandler())
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, hdr := getStatus(t, srv.URL)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "1", hdr.Get("Retry-After"))
}

func TestConcurrencyMisuse(t *testing.T) {
	l, err := adaptive.New()
	require.NoError(t, err)
	require.Panics(t, func() { admithttp.Concurrency(nil) })
	require.Panics(t, func() { admithttp.Concurrency(l, nil) })
	require.Panics(t, func() { admithttp.Concurrency(l, admithttp.WithRequestPriority(nil)) })
	require.Panics(t, func() { admithttp.Concurrency(l, admithttp.WithShedHandler(nil)) })
	require.Panics(t, func() { admithttp.Concurrency(l, admithttp.WithRetryAfterHint(0)) })
	require.Panics(t, func() { admithttp.Concurrency(l)(nil) })
}

// The Retry-After hint is rounded up to whole seconds, up to the largest
// duration, whose rounding must not overflow into a negative header.
func TestConcurrencyRetryAfterRounding(t *testing.T) {
	l := fullLimiter(t)
	for _, tc := range []struct {
		hint time.Duration
		want string
	}{
		{1, "1"},
		{time.Second, "1"},
		{1500 * time.Millisecond, "2"},
		{math.MaxInt64, "9223372037"},
	} {
		srv := httptest.NewServer(admithttp.Concurrency(l, admithttp.WithRetryAfterHint(tc.hint))(http.NotFoundHandler()))
		code, hdr := getStatus(t, srv.URL)
		srv.Close()
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, tc.want, hdr.Get("Retry-After"), "hint %v", tc.hint)
	}
}

// The handler's writer has http.Flusher and http.Hijacker exactly when the
// server's has them, and they work through it: a flushed chunk reaches the
// client while the handler still runs, a hijacked HTTP/1.1 connection
// carries the handler's own response; over HTTP/2, which cannot hijack,
// the writer is a Flusher and no Hijacker. Each permit is released with
// the handler.
func TestConcurrencyWriterInterfaces(t *testing.T) {
	l, err := adaptive.New()
	require.NoError(t, err)
	read := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/interfaces", func(w http.ResponseWriter, r *http.Request) {
		_, f := w.(http.Flusher)
		_, h := w.(http.Hijacker)
		fmt.Fprintf(w, "flusher=%v hijacker=%v", f, h)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-read: // the client has the first line: the flush went through
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = rw.Flush()
	})
	h := admithttp.Concurrency(l)(mux)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a broken flush would hang
	defer cancel()
	get := func(c *http.Client, url string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		return c.Do(req)
	}
	body := func(c *http.Client, url string) string {
		resp, err := get(c, url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	require.Equal(t, "flusher=true hijacker=true", body(srv.Client(), srv.URL+"/interfaces"))
	resp, err := get(srv.Client(), srv.URL+"/stream")
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "first\n", line)
	close(read)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "second\n", string(rest))
	require.Equal(t, "hijacked", body(srv.Client(), srv.URL+"/hijack"))

	tls := httptest.NewUnstartedServer(h)
	tls.EnableHTTP2 = true
	tls.StartTLS()
	defer tls.Close()
	resp, err = get(tls.Client(), tls.URL+"/interfaces")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 2, resp.ProtoMajor)
	require.Equal(t, "flusher=true hijacker=false", string(b))

	require.Eventually(t, func() bool { return l.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	s := l.Stats()
	require.Equal(t, uint64(4), s.Successes)
	require.Zero(t, s.Drops)
}

// TestConcurrencyEveryEnd: every way a handler can end releases its permit, classified as the
// package doc says: a panic (http.ErrAbortHandler or any other value) is
// a drop, a hijacked connection closed without a word a success, a handler
// that never writes a success (the implicit 200), a 503 it writes itself a
// drop, a handler that returns after an outer deadline without writing a
// drop; a request whose context ended before Concurrency asked takes no
// permit and counts nothing.
func TestConcurrencyEveryEnd(t *testing.T) {
	l, err := adaptive.New(adaptive.WithInitialLimit(4))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("/abort", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	mux.HandleFunc("/abort-after-write", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		c.Close()
	})
	mux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	h := admithttp.Concurrency(l)(mux)
	gone := make(chan struct{}, 1)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/late":
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Millisecond)
			defer cancel()
			r = r.WithContext(ctx)
		case "/gone":
			<-r.Context().Done() // the client closed the connection first
			defer func() { gone <- struct{}{} }()
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(outer)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	for _, tc := range []struct {
		path      string
		clientErr bool
		drop      bool
	}{
		{"/abort", true, true},
		{"/panic", true, true},
		{"/abort-after-write", true, true},
		{"/hijack", true, false},
		{"/silent", false, false},
		{"/503", false, true},
		{"/late", false, true},
	} {
		before := l.Stats()
		resp, err := client.Post(srv.URL+tc.path, "text/plain", nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if tc.clientErr {
			require.Error(t, err, tc.path)
		} else {
			require.NoError(t, err, tc.path)
		}
		require.Eventually(t, func() bool { return l.InFlight() == 0 }, 10*time.Second, time.Millisecond, tc.path)
		after := l.Stats()
		require.Equal(t, uint64(1), (after.Drops+after.Successes+after.Ignored)-(before.Drops+before.Successes+before.Ignored), tc.path)
		if tc.drop {
			require.Equal(t, before.Drops+1, after.Drops, tc.path)
		} else {
			require.Equal(t, before.Successes+1, after.Successes, tc.path)
		}
	}

	before := l.Stats()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte("GET /gone HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	c.Close()
	<-gone
	after := l.Stats()
	before.Limit, after.Limit, before.Baseline, after.Baseline = 0, 0, 0, 0
	require.Equal(t, before, after, "a request whose context had ended takes and counts nothing")
}

// A HEAD request over HTTP/2 whose handler writes its headers before it
// returns (a GET handler serving more than the server's 4 KiB write buffer,
// or one that flushes) is answered with END_STREAM at once, and the server
// then cancels the request's context while the handler still runs: no
// client gave up and no deadline passed, and the response was a 200. Such a
// request must end its permit a Success, as it does over HTTP/1.1.
func TestConcurrencyHeadOverHTTP2(t *testing.T) {
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

// readFromRecorder stands between the server and Concurrency and counts the
// copies that reach its ReadFrom, the server's own below it.
type readFromRecorder struct {
	http.ResponseWriter
	n *atomic.Int32
}

func (w readFromRecorder) ReadFrom(r io.Reader) (int64, error) {
	w.n.Add(1)
	return w.ResponseWriter.(io.ReaderFrom).ReadFrom(r)
}

// io.Copy to the handler's writer reaches the server's ReadFrom (how
// http.FileServer sends a file with sendfile), and the outcome is read as
// from Write: a copied body is the implicit 200, a Success; a copy of
// nothing commits no status, so a 503 the handler writes after it is a
// drop, and is what the client gets.
func TestConcurrencyReadFrom(t *testing.T) {
	l, err := adaptive.New()
	require.NoError(t, err)
	mux := http.NewServeMux()
	// struct{ io.Reader } hides strings.Reader's WriteTo, which io.Copy
	// would use before the writer's ReadFrom.
	mux.HandleFunc("/copy", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, struct{ io.Reader }{strings.NewReader("payload")})
	})
	mux.HandleFunc("/empty-then-503", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, struct{ io.Reader }{strings.NewReader("")})
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h := admithttp.Concurrency(l)(mux)
	var copies atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(readFromRecorder{w, &copies}, r)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		path   string
		status int
		body   string
		copies int32
		drop   bool
	}{
		{"/copy", http.StatusOK, "payload", 1, false},
		{"/empty-then-503", http.StatusServiceUnavailable, "", 2, true},
	} {
		before := l.Stats()
		resp, err := srv.Client().Get(srv.URL + tc.path)
		require.NoError(t, err, tc.path)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.status, resp.StatusCode, tc.path)
		require.Equal(t, tc.body, string(b), tc.path)
		require.Equal(t, tc.copies, copies.Load(), "%s: copies through the server's ReadFrom", tc.path)
		require.Eventually(t, func() bool { return l.InFlight() == 0 }, 5*time.Second, time.Millisecond, tc.path)
		after := l.Stats()
		if tc.drop {
			require.Equal(t, before.Drops+1, after.Drops, tc.path)
		} else {
			require.Equal(t, before.Successes+1, after.Successes, tc.path)
		}
	}
}
