# admit: run `make test` for the test suite and `make bench` for the quick comparison.
GO ?= go
STATICCHECK_VERSION := v0.8.2

# `make help` lists every target with its one-line description (the text after
# `##` on the target's line).
help: ## this list
	@awk -F':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  make %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: help test xtime lint fuzz bench bench-full bench-keyed bench-redis bench-otel bench-overload plots storm algorithms loadrun rls

# go vet and the race-enabled tests, over the core module, bench/,
# redisbucket/, rls/, admitgrpc/, admitotel/ and integration/ (the tests of
# admitgrpc and admitotel over redisbucket; redisbucket's and integration's
# tests start their own redis-server: .ci/redis-server installs it when
# missing), and golang.org/x/time/rate v0.16.0's own tests
# run against ./rate (taken from the module cache through a build overlay;
# see rate/testdata/xtime.sh). adaptive's simulator tests are built without
# the race detector (//go:build !race: one goroutine at a time on a virtual
# clock, ten times slower under it) and run in the plain pass of ./adaptive. The race
# detector needs cgo and a C
# compiler: .ci/cc installs gcc when missing.
test: export CGO_ENABLED = 1
test: ## go vet + race tests over every module (starts redis-server itself)
	GO=$(GO) .ci/cc
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 ./adaptive
	$(GO) vet -tags admit_purego ./... && $(GO) test -tags admit_purego -count=1 ./keyed ./shardedbucket ./internal/tsc
	$(GO) vet -tags admit_nocounter ./internal/... ./keyed && $(GO) test -tags admit_nocounter -count=1 ./internal/tsc ./internal/refill ./keyed
	GO=$(GO) bash rate/testdata/xtime.sh -race -count=1
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	.ci/redis-server
	cd redisbucket && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd rls && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd admitgrpc && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd admitotel && $(GO) vet ./... && $(GO) test -race -count=1 ./... && $(GO) test -count=1 ./... && $(GO) test -tags admit_purego -count=1 ./...
	cd integration && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# Only x/time/rate's tests against ./rate, verbose.
xtime: ## only x/time/rate's own tests against ./rate, verbose
	GO=$(GO) bash rate/testdata/xtime.sh -race -count=1 -v

# gofmt, vet and staticcheck (pinned, run through the go command).
lint: ## gofmt, go vet and staticcheck over every module
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd redisbucket && $(GO) vet ./...
	cd rls && $(GO) vet ./...
	cd admitgrpc && $(GO) vet ./...
	cd admitotel && $(GO) vet ./...
	cd integration && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd redisbucket && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd rls && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd admitgrpc && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd admitotel && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd integration && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Longer runs of the fuzz tests (their seed corpora run in `make test`).
fuzz: ## longer runs of the fuzz tests (their seeds run in make test)
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 60s ./buckettest/
	$(GO) test -run '^$$' -fuzz FuzzReservations -fuzztime 60s ./buckettest/
	$(GO) test -run '^$$' -fuzz FuzzModel -fuzztime 60s ./shardedbucket/
	for p in fixedwindow slidinglog slidingwindow leakybucket; do \
		$(GO) test -run '^$$' -fuzz FuzzModel -fuzztime 30s ./$$p/ || exit 1; \
	done
	$(GO) test -run '^$$' -fuzz FuzzModel -fuzztime 60s ./keyed/
	$(GO) test -run '^$$' -fuzz FuzzLimits -fuzztime 60s ./keyed/
	$(GO) test -run '^$$' -fuzz FuzzValid -fuzztime 15s .
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 60s ./rate/
	$(GO) test -run '^$$' -fuzz FuzzKeyByForwardedFor -fuzztime 30s ./admithttp/
	$(GO) test -run '^$$' -fuzz FuzzKeyByIP -fuzztime 15s ./admithttp/
	cd rls && $(GO) test -run '^$$' -fuzz FuzzModel -fuzztime 30s ./memstore/
	cd rls && $(GO) test -run '^$$' -fuzz FuzzChanges -fuzztime 30s ./memstore/
	cd rls && $(GO) test -run '^$$' -fuzz FuzzTable -fuzztime 30s ./memstore/
	cd redisbucket && $(GO) test -run '^$$' -fuzz FuzzPolicyModel -fuzztime 30s -fuzzminimizetime 2s .
	cd redisbucket && $(GO) test -run '^$$' -fuzz FuzzFastPath -fuzztime 30s -fuzzminimizetime 2s .
	cd admitgrpc && $(GO) test -run '^$$' -fuzz FuzzKeyByPeer -fuzztime 15s .
	cd admitotel && $(GO) test -run '^$$' -fuzz FuzzCounts -fuzztime 30s .

# The quick comparison, about a minute: cases admit and reject, serial and
# parallel, every implementation and floor, -cpu 1,2, six samples each. Prints
# a summary that fits 100 columns (one row per case, one column per
# implementation in ns/op, then the speed-up over x/time/rate) and says
# where the full benchstat matrix, p-values included, was written; then
# keyed's part, about half a minute more: keyed against its fastest peer at
# 10k held keys, and one Limiter's scaling from -cpu 1 to -cpu 2.
bench: ## the quick comparison (~1.5 min): tables of medians with their spread, keyed's peer ratio and scaling
	cd bench && GO=$(GO) $(GO) run ./cmd/report -quick

# The full comparison for results/, about 19 minutes on a quiet 2-core
# machine: every case at -cpu 1,2,4,8, -count 10. Writes
# results/<date>-<host>-<commit>.txt (with a header naming the machine, Go
# version, commit and command) and the benchstat table beside it.
bench-full: ## the committed comparison (~20 min): results/<date>-<host>-<commit>*
	cd bench && GO=$(GO) $(GO) run ./cmd/report -results ../results

# The per-key comparison (keyed vs a sync.Map of x/time/rate, httprate,
# go-limiter, tollbooth) at 1, 10k and 1M keys, -cpu 2, with heap bytes per
# key at 1M keys; a few minutes. Prints the benchstat table; then keyed's
# AllowN under one limit against AllowLimits under three, at 10k keys.
# KEYED_ROUNDS passes over every case, one sample each, so that a slow
# phase of a shared machine falls on all implementations alike (-count N
# would take a case's N samples back to back).
KEYED_ROUNDS ?= 6
bench-keyed: ## keyed vs its peers at 1, 10k and 1M keys, -cpu 2; then 3 limits against 1
	cd bench && $(GO) test -c -o keyed.test . && for i in $$(seq $(KEYED_ROUNDS)); do ./keyed.test -test.run '^$$' -test.bench '^BenchmarkKeyed$$' -test.benchtime 300000x -test.cpu 2; done | tee keyed.tmp.txt
	cd bench && $(GO) run golang.org/x/perf/cmd/benchstat -col /impl keyed.tmp.txt
	cd bench && for i in $$(seq $(KEYED_ROUNDS)); do ./keyed.test -test.run '^$$' -test.bench '^BenchmarkKeyedLimits$$' -test.benchtime 300000x -test.cpu 2; done | tee keyedlimits.tmp.txt
	cd bench && $(GO) run golang.org/x/perf/cmd/benchstat -col /impl keyedlimits.tmp.txt

# SVG charts of the newest full result, into results/plots/.
plots: ## SVG charts of the newest full result into results/plots/
	cd bench && $(GO) run ./cmd/plots -results ../results

# Accuracy (admitted vs capacity + rate x elapsed) and waiter fairness, every
# implementation on the real clock, under a minute; saves results/storm-<date>.txt.
storm: ## accuracy and waiter fairness of every limiter on the real clock
	cd bench && $(GO) run ./cmd/storm -save ../results

# The classic algorithms side by side (fixed window, sliding log, sliding
# window, token bucket, GCRA, leaky bucket): one synthetic trace on a fake
# clock, the sliding window's error, memory and ns/op, about half a minute;
# saves results/algorithms-<date>.txt and results/plots/algorithms-boundary.svg.
algorithms: ## the classic algorithms on one synthetic trace
	cd bench && $(GO) run ./cmd/algorithms -save ../results

# redisbucket against go-redis/redis_rate, rueidis and the redis-benchmark
# floor, plus the storm on the server clock, against one redis-server it
# starts; about two minutes. Saves results/redis-<date>-<host>-<commit>.txt.
bench-redis: ## redisbucket vs redis_rate, rueidis and redis-benchmark
	.ci/redis-server
	cd redisbucket && $(GO) run ./internal/cmd/redisbench -save ../results -benchtime 10000x -count 5
	cd bench && $(GO) run ./cmd/redisplots -results ../results

# The middleware's loopback load run: vegeta against a 127.0.0.1 server with
# and without each middleware, under a minute; saves results/loadrun-<date>.txt.
loadrun: ## the middleware's loopback load run with vegeta
	cd bench && $(GO) run ./cmd/loadrun -rounds 3 -duration 2s -save ../results

# admit-rls, Envoy's rate limit service, with the memory backend and the
# example configuration in rls/examples/config (edit it while it runs):
# gRPC on 127.0.0.1:8081, HTTP /healthcheck and POST /json on 127.0.0.1:8080.
rls: ## admit-rls on the memory backend with rls/examples/config
	cd rls && HOST=127.0.0.1 GRPC_HOST=127.0.0.1 DEBUG_HOST=127.0.0.1 RUNTIME_ROOT=examples RUNTIME_APPDIRECTORY=config \
		BACKEND_TYPE=memory LOG_LEVEL=INFO $(GO) run ./cmd/admit-rls

# admitotel's BenchmarkOverhead: bare and wrapped calls alternating in one
# run, -cpu 1,2, -count 10, a few minutes; saves results/otel-<date>-<host>-<commit>.txt
# and its benchstat table.
bench-otel: ## admitotel's cost over the bare call (a few minutes); saves results/otel-*.txt
	GO=$(GO) bash admitotel/testdata/overhead.sh

# The adaptive limiters side by side on the wall clock: a loopback net/http
# server whose handler is 8 workers of 40 ms, Poisson load at 1x to 5x its
# capacity (200 to 1,000 requests a second: a quarter of a core), then a
# capacity step, then a sustained 2x overload of the adaptive ones; no
# limiter, fixed limits (chanpool), failsafe-go's adaptivelimiter (defaults
# and tuned) and adaptive. About 11 minutes;
# saves results/overload-<date>-<host>-<commit>.txt and
# results/plots/overload-*.svg. Run it on a quiet machine.
bench-overload: ## adaptive vs failsafe-go and fixed limits under overload (~11 min); saves results/overload-*
	cd bench && $(GO) run ./cmd/overload -save ../results
