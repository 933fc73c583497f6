#!/usr/bin/env bash
# Runs golang.org/x/time/rate's own tests (rate_test.go, sometimes_test.go)
# against this package. The files come from the module cache at test time and
# are never written into the source tree: a go build overlay adds them to the
# package as if they were there. The only change is the import path in the
# external test file (sometimes_test.go); rate_test.go is an internal test of
# package rate and runs as it is. Fails if any of their tests fail, or if the
# overlay did not bring them in.
#
# Usage: bash rate/testdata/xtime.sh [go test flags]
set -euo pipefail
GO=${GO:-go}
cd "$(dirname "$0")/../.."
root=$(pwd)
$GO mod download golang.org/x/time
src=$($GO list -m -f '{{.Dir}}' golang.org/x/time)/rate
ver=$($GO list -m -f '{{.Version}}' golang.org/x/time)
if [ "$ver" != v0.16.0 ]; then
	echo "xtime: go.mod requires golang.org/x/time $ver; these tests are pinned to v0.16.0" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src/rate_test.go" "$work/rate_test.go"
sed 's#"golang.org/x/time/rate"#"github.com/admit-go/admit/rate"#' "$src/sometimes_test.go" >"$work/sometimes_test.go"
# Exactly one line may differ from the original: the import path.
if [ "$(diff "$src/sometimes_test.go" "$work/sometimes_test.go" | grep -c '^[<>]')" != 2 ]; then
	echo "xtime: the import rewrite did not change exactly one line" >&2
	exit 1
fi
cat >"$work/overlay.json" <<JSON
{"Replace": {
	"$root/rate/xtime_rate_test.go": "$work/rate_test.go",
	"$root/rate/xtime_sometimes_test.go": "$work/sometimes_test.go"
}}
JSON
# The overlay must have brought the tests in: list them first.
listed=$($GO test -overlay "$work/overlay.json" -list '^(TestLimiterJumpBackwards|TestSometimesMax|ExampleSometimes_mix)$' ./rate/)
for name in TestLimiterJumpBackwards TestSometimesMax ExampleSometimes_mix; do
	if ! grep -qx "$name" <<<"$listed"; then
		echo "xtime: $name is not in the package: the overlay did not apply" >&2
		exit 1
	fi
done
# Run x/time/rate's tests and examples only: the package's own tests run in
# the plain go test ./... of make test.
names=$(grep -ohE '^func (Test|Example)[A-Za-z0-9_]*' "$work/rate_test.go" "$work/sometimes_test.go" | awk '{print $2}' | paste -sd'|' -)
echo "xtime: running golang.org/x/time/rate $ver's rate_test.go and sometimes_test.go against ./rate"
$GO test -overlay "$work/overlay.json" -run "^($names)\$" "$@" ./rate/
