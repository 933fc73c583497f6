package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/admit-go/admit/rls"
)

// debugHandler is envoyproxy/ratelimit's debug listener (DEBUG_HOST,
// DEBUG_PORT): / lists the endpoints, /rlconfig dumps the configuration in
// force (one line per rule), /debug/pprof/ serves the Go profiles.
func debugHandler(svc *rls.Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c := svc.Config(); c != nil {
			fmt.Fprint(w, c.Dump())
		}
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "/debug/pprof/: the Go profiles\n/rlconfig: the configuration in force\n")
	})
	return mux
}
