package main

import (
	"expvar"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sort"

	"github.com/admit-go/admit/rls"
)

// debugHandler is envoyproxy/ratelimit's debug listener (DEBUG_HOST,
// DEBUG_PORT), with its endpoints and their descriptions: /rlconfig dumps
// the configuration in force (one line per rule), /stats the expvar
// variables (the command line and the Go memory statistics),
// /debug/pprof/ serves the Go profiles, and any other path lists the
// endpoints.
func debugHandler(svc *rls.Service) http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{}
	add := func(path, help string, h http.HandlerFunc) {
		endpoints[path] = help
		mux.HandleFunc(path, h)
	}
	add("/debug/pprof/", "root of various pprof endpoints. hit for help.", pprof.Index)
	add("/debug/pprof/profile", "CPU profiling endpoint", pprof.Profile)
	add("/debug/pprof/trace", "trace endpoint", pprof.Trace)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	add("/stats", "print out stats", func(w http.ResponseWriter, r *http.Request) {
		expvar.Do(func(kv expvar.KeyValue) { fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value) })
	})
	add("/rlconfig", "print out the currently loaded configuration for debugging", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c := svc.Config(); c != nil {
			fmt.Fprint(w, c.Dump())
		}
	})
	paths := make([]string, 0, len(endpoints))
	for p := range endpoints {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, p := range paths {
			fmt.Fprintf(w, "%s: %s\n", p, endpoints[p])
		}
	})
	return mux
}
