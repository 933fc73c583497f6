package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// raiseConfig is the raise mode's configuration: one rule, requests_per_unit
// a minute.
const raiseConfig = "domain: raise\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: %d}\n"

// poll is how often a client asks while it waits.
const poll = 10 * time.Millisecond

// raiseRounds measures, in each round, how long a drained client waits to
// be admitted after a reload raises its limit: the file is written with 5
// a minute; once the service applies it, a fresh client (a new value)
// drains its limit and keeps asking every 10 ms for 1 s plus a random
// quarter second at most, refused (the random part puts the rename at a
// random phase of a service that polls its directory, admit-rls every
// 200 ms, rather than at the same phase each round); then the file is
// replaced (a rename) with 600 a minute, and the client keeps asking every
// 10 ms. It prints, per round, the time from the rename until the first
// answer that shows the new limit (the reload) and until the first
// admission.
func raiseRounds(addr, file, label string, rounds int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	ask := func(value string, n uint64) (*pb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "raise", Descriptors: []*common.RateLimitDescriptor{{
			Entries:    []*common.RateLimitDescriptor_Entry{{Key: "client", Value: value}},
			HitsAddend: wrapperspb.UInt64(n),
		}}})
	}
	limitOf := func(r *pb.RateLimitResponse) uint32 { return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() }
	for round := 1; round <= rounds; round++ {
		value := fmt.Sprintf("%s-%d-%d", label, round, time.Now().UnixNano())
		if err := write(file, fmt.Sprintf(raiseConfig, 5)); err != nil {
			return err
		}
		if err := until(60*time.Second, func() (bool, error) {
			r, err := ask(value, 0)
			return err == nil && limitOf(r) == 5, nil
		}); err != nil {
			return fmt.Errorf("round %d: the limit of 5 a minute never applied: %w", round, err)
		}
		drained := false
		for range 10 {
			r, err := ask(value, 1)
			if err != nil {
				return err
			}
			if r.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
				drained = true
				break
			}
		}
		if !drained {
			return fmt.Errorf("round %d: 10 requests on a limit of 5 were all admitted", round)
		}
		for end := time.Now().Add(time.Second + rand.N(250*time.Millisecond)); time.Now().Before(end); time.Sleep(poll) {
			if _, err := ask(value, 1); err != nil {
				return err
			}
		}
		if err := write(file, fmt.Sprintf(raiseConfig, 600)); err != nil {
			return err
		}
		start := time.Now()
		var reload, admitted time.Duration
		err := until(60*time.Second, func() (bool, error) {
			r, err := ask(value, 1)
			if err != nil {
				return false, err
			}
			if reload == 0 && limitOf(r) == 600 {
				reload = time.Since(start)
			}
			if r.OverallCode == pb.RateLimitResponse_OK {
				admitted = time.Since(start)
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		fmt.Printf("%s round=%d reload=%v admitted=%v\n", label, round, reload.Round(time.Millisecond), admitted.Round(time.Millisecond))
	}
	return nil
}

// until calls f every poll until it reports true, returns an error, or
// limit passes.
func until(limit time.Duration, f func() (bool, error)) error {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(poll) {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("not within %v", limit)
}

// write replaces file's content with a rename, as a configuration
// management tool (or Kubernetes) does. The new content is written beside
// the configuration directory, not in it, where a service would read it as
// a second file of the same domain.
func write(file, content string) error {
	tmp := filepath.Join(filepath.Dir(filepath.Dir(file)), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
