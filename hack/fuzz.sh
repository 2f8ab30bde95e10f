#!/usr/bin/env bash
# Runs every fuzz target of the given packages for FUZZTIME each (default
# 100000x: a count of inputs, not a duration; a duration races Go's fuzzing
# coordinator, which then fails a target with a bare "context deadline
# exceeded" and no failing input on a loaded machine: golang/go#75804,
# fixed in Go 1.27).
# On a failure it prints the fuzzer's whole output and the failing input,
# which `go test -fuzz` keeps under the package's testdata/fuzz/<Target>/
# (commit it: `go test` then replays it as a regression case).
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-100000x}
status=0
for p in "$@"; do
	targets=$($GO test -list '^Fuzz' "$p" | grep '^Fuzz') || { echo "fuzz: cannot list the targets of $p"; exit 1; }
	dir=$($GO list -f '{{.Dir}}' "$p")
	for t in $targets; do
		echo "fuzz $p $t ($FUZZTIME)"
		before=$(find "$dir/testdata/fuzz/$t" -type f 2>/dev/null | sort)
		log=$(mktemp)
		# -parallel 2: this machine has two cores; more workers only
		# slow the coordinator down.
		if ! $GO test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -parallel 2 "$p" >"$log" 2>&1; then
			echo "fuzz: $p $t FAILED; the fuzzer said:"
			cat "$log"
			after=$(find "$dir/testdata/fuzz/$t" -type f 2>/dev/null | sort)
			for f in $(comm -13 <(echo "$before") <(echo "$after")); do
				echo "fuzz: failing input kept in $f:"
				cat "$f"
			done
			status=1
		fi
		rm -f "$log"
	done
done
exit $status
