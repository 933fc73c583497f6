# admit: run `make test` for the test suite and `make bench` for the quick comparison.
GO ?= go
STATICCHECK_VERSION := v0.8.2

.PHONY: test lint fuzz bench bench-full plots storm

# go vet and the race-enabled tests, over the core module and bench/.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# gofmt, vet and staticcheck (pinned, run through the go command).
lint:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Longer runs of the fuzz tests (their seed corpora run in `make test`).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 60s ./buckettest/
	$(GO) test -run '^$$' -fuzz FuzzReservations -fuzztime 60s ./buckettest/

# The quick comparison, about a minute: cases admit and reject, serial and
# parallel, every implementation and floor, -cpu 1,2, six samples each. Prints
# a summary that fits 100 columns (one row per case, one column per
# implementation in ns/op, then the speed-up over x/time/rate) and says
# where the full benchstat matrix, p-values included, was written.
bench:
	cd bench && GO=$(GO) $(GO) run ./cmd/report -quick

# The full comparison for results/, about 15 minutes on a quiet 2-core
# machine: every case at -cpu 1,2,4,8, -count 10. Writes
# results/<date>-<host>-<commit>.txt (with a header naming the machine, Go
# version, commit and command) and the benchstat table beside it.
bench-full:
	cd bench && GO=$(GO) $(GO) run ./cmd/report -results ../results

# SVG charts of the newest full result, into results/plots/.
plots:
	cd bench && $(GO) run ./cmd/plots -results ../results

# Accuracy (admitted vs capacity + rate x elapsed) and waiter fairness, every
# implementation on the real clock, under a minute; saves results/storm-<date>.txt.
storm:
	cd bench && $(GO) run ./cmd/storm -save ../results
