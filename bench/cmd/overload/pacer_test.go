package main

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestLoadSendsExactlyTheRunsArrivals checks that a run sends every
// Poisson arrival within its length and none after it, counted against
// the arrivals drawn independently from the same seed: the same requests
// for every implementation. Sending until vegeta's duration had passed
// sent one more, the first arrival after the run's end.
func TestLoadSendsExactlyTheRunsArrivals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	const rate, dur = 400.0, 150 * time.Millisecond
	for seed := uint64(1); seed <= 3; seed++ {
		want := 0
		rng := rand.New(rand.NewPCG(seed, 7))
		for at := time.Duration(0); ; want++ {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if at > dur {
				break
			}
		}
		got := 0
		seqs := map[uint64]bool{}
		for res := range load(srv.URL, poisson(rate, seed, dur), "t") {
			got++
			seqs[res.Seq] = true
			if res.Code != http.StatusOK {
				t.Errorf("seed %d: status %d (%s)", seed, res.Code, res.Error)
			}
		}
		if got != want || len(seqs) != want {
			t.Errorf("seed %d: %d requests sent (%d distinct), want the %d arrivals within %v", seed, got, len(seqs), want, dur)
		}
	}
}
