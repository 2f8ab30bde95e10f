#!/usr/bin/env bash
# Runs make targets one after the other, printing how long each took, and
# stops at the first that fails (its time printed too).
#
#   MAKE=make hack/stages.sh deps unit nocgo ...
set -uo pipefail
summary=()
total=$SECONDS
for stage in "$@"; do
	t0=$SECONDS
	if ! ${MAKE:-make} --no-print-directory "$stage"; then
		echo "== stage $stage: FAILED after $((SECONDS - t0)) s (stages before it: ${summary[*]:-none})"
		exit 1
	fi
	summary+=("$stage $((SECONDS - t0))s")
	echo "== stage $stage: $((SECONDS - t0)) s"
done
echo "== stages: ${summary[*]}; total $((SECONDS - total)) s"
