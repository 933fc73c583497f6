#!/usr/bin/env bash
# Side by side: envoyproxy/ratelimit and admit-rls on one redis-server with
# one configuration, measured by rlsbench; admit-rls's memory backend beside
# them. Usage, from rls/:
#
#   RATELIMIT=/path/to/envoyproxy-ratelimit-binary [ROUNDS=3] internal/cmd/rlsbench/sidebyside.sh [duration]
#
# Build that binary from the module proxy in a scratch directory outside
# this repository (never in it):
#
#   cd "$(mktemp -d)" && go mod init scratch && go get github.com/envoyproxy/ratelimit/src/service_cmd@VERSION
#   go build -o ratelimit github.com/envoyproxy/ratelimit/src/service_cmd
#
# Prints a header (internal/cmd/stamp: the machine, its caches and clock;
# versions, commit), every rlsbench line, the
# median over the rounds of each service's throughput and p99 per stream
# count, and of the raise runs: the time from a reload that raises a drained
# client's limit until the client is admitted.
set -euo pipefail
d=${1:-5s}
: "${RATELIMIT:?set RATELIMIT to the envoyproxy/ratelimit binary}"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/runtime/sub/config"
cat > "$work/runtime/sub/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: client
    value: hot
    rate_limit: {unit: second, requests_per_unit: 50}
YAML

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing on port $1" >&2; return 1; }

rport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --loglevel warning --logfile "$work/redis.log" &
pids+=($!)
wait_port "$rport"

go build -o "$work/admit-rls" ./cmd/admit-rls
go build -o "$work/rlsbench" ./internal/cmd/rlsbench

echo "# rlsbench side by side, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
(cd .. && go run ./internal/cmd/stamp -prefix '# ' -go "$(go env GOVERSION)" -command "cd rls && RATELIMIT=$RATELIMIT ROUNDS=${ROUNDS:-3} internal/cmd/rlsbench/sidebyside.sh $d")
echo "# $(go version); $(redis-server --version | cut -d' ' -f1-3)"
echo "# admit-rls commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+dirty'); envoyproxy/ratelimit: $RATELIMIT"
echo "# duration per run: $d; config: client=<value> 1e6/s (throughput), client=hot 50/s, burst 50 (accuracy: an idle client's"
echo "# 16 streams start 50 ms before a whole second and run 3 s; the bucket bound is 50 + 50/s x T: 55 in 100 ms, 100 in 1 s, 200 in 3 s)"

# RUNTIME_WATCH_ROOT=false: envoyproxy/ratelimit reloads on a change in the
# directory (by default only on a swap of RUNTIME_ROOT's link); admit-rls
# polls, and notes that the setting has no effect there.
common=(RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=sub RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false USE_STATSD=false LOG_LEVEL=ERROR
	REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" REDIS_TYPE=SINGLE)

# start label env...: starts one service and records its gRPC port in
# gport[label] once its configuration is in force (client=hot is limited).
declare -A gport
start() {
	local label=$1; shift
	local gp hp
	gp=$(port); hp=$(port)
	env "${common[@]}" GRPC_HOST=127.0.0.1 GRPC_PORT="$gp" HOST=127.0.0.1 PORT="$hp" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(port)" "$@" 2>"$work/$label.log" &
	pids+=($!)
	wait_port "$gp"
	for _ in $(seq 100); do
		curl -s "127.0.0.1:$hp/json" -d '{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"hot"}],"hitsAddend":"0"}]}' | grep -q currentLimit && break
		sleep 0.05
	done
	gport[$label]=$gp
}

start ratelimit-redis BACKEND_TYPE=redis "$RATELIMIT"
start admit-rls-redis BACKEND_TYPE=redis "$work/admit-rls"
start admit-rls-memory BACKEND_TYPE=memory "$work/admit-rls"
labels=(ratelimit-redis admit-rls-redis admit-rls-memory)

# Throughput: every service runs, one after another, at each stream count,
# in ROUNDS rounds, the order rotated each round, so that a change in the
# machine's load between two runs falls on every service alike. Redis is
# flushed before each run.
rounds=${ROUNDS:-3}
# A warm-up, not reported: the first calls open connections and load the
# scripts (admit-rls's first EVALSHA on a server answers NOSCRIPT).
for label in "${labels[@]}"; do
	"$work/rlsbench" -addr "127.0.0.1:${gport[$label]}" -label warmup -streams 16 -d 1s >/dev/null
done
echo "# throughput: a 1 s warm-up of each service (not shown), then $rounds rounds; in each, every stream count, and at each the three services back to back (order rotated per round)"
for r in $(seq "$rounds"); do
	for st in 1 16 64; do
		for i in 0 1 2; do
			label=${labels[$(((i + r) % 3))]}
			redis-cli -p "$rport" flushall >/dev/null
			"$work/rlsbench" -addr "127.0.0.1:${gport[$label]}" -label "round=$r $label" -streams "$st" -d "$d" | tee -a "$work/tp.txt"
		done
	done
done
for label in "${labels[@]}"; do
	redis-cli -p "$rport" flushall >/dev/null
	"$work/rlsbench" -addr "127.0.0.1:${gport[$label]}" -label "$label" -accuracy -streams 16 -d 3s -windows 100ms,1s -boundary 50ms
done
# Raise: a reload that raises a drained client's limit from 5 to 600 a
# minute (the file replaced by a rename), and the time until the client,
# asking every 10 ms, is admitted; $rounds rounds per service.
echo "# raise: per round, the time from the rename until an answer shows the new limit (reload) and until the drained client is admitted"
for label in "${labels[@]}"; do
	"$work/rlsbench" -addr "127.0.0.1:${gport[$label]}" -label "$label" -raise "$work/runtime/sub/config/raise.yaml" -rounds "$rounds" | tee -a "$work/raise.txt"
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# median over the $rounds rounds (service, streams: decisions per second, p99; raise: reload, admitted)"
python3 - "$work/tp.txt" "$work/raise.txt" <<'PY'
import re, statistics, sys
def seconds(v):
    unit = re.match(r'[\d.]+(\D+)$', v).group(1)
    return float(v[:-len(unit)]) * {'ms': 1e-3, 'µs': 1e-6, 's': 1.0}[unit]
raise_runs = {}
for line in open(sys.argv[2]):
    m = re.match(r'(\S+) round=\d+ reload=(\S+) admitted=(\S+)', line)
    if m:
        raise_runs.setdefault(m.group(1), []).append((seconds(m.group(2)), seconds(m.group(3))))
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r'round=\d+ (\S+) streams=(\d+) .*per_sec=(\d+) p50=\S+ p99=(\S+)', line)
    if not m:
        continue
    p99 = m.group(4)
    scale = {'ms': 1e-3, 'µs': 1e-6, 's': 1.0}
    unit = re.match(r'[\d.]+(\D+)$', p99).group(1)
    runs.setdefault((m.group(1), int(m.group(2))), []).append((int(m.group(3)), float(p99[:-len(unit)]) * scale[unit]))
for (label, st), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"median {label} streams={st} per_sec={statistics.median(x[0] for x in v):.0f} p99={statistics.median(x[1] for x in v)*1e3:.2f}ms runs={len(v)}")
for label, v in raise_runs.items():
    print(f"median {label} raise reload={statistics.median(x[0] for x in v)*1e3:.0f}ms admitted={statistics.median(x[1] for x in v)*1e3:.0f}ms "
          f"max_admitted={max(x[1] for x in v)*1e3:.0f}ms runs={len(v)}")
PY
