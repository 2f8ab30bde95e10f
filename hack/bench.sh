#!/usr/bin/env bash
# make bench: in one boot of the test VM (or on the host's own RDMA device),
# run perftest and rmabench on the same device with the same iterations,
# print one table and write bench-results.json.
#
#   RXEVM=.cache/bin/rxevm BIN=.cache/bin hack/bench.sh
#
# Environment (all optional):
#   BENCH_ITERS   latency iterations (perftest -n), default 1000
#   BENCH_RATE    message-rate iterations (ib_atomic_bw -n), default 10000
#   BENCH_BYTES   bytes per bandwidth case: ib_write_bw -n = BENCH_BYTES / 1 MiB, default 200MiB
#   BENCH_ROUNDS  rounds; the table compares the medians, default 3
#   BENCH_OUT     where the JSON goes, default bench-results.json
#   BENCH_ARGS    more rmabench flags (-d DEV -x GID -m MTU -q N -spin D ...)
#   RXEVM_ARGS    rxevm flags (-vm always, -smp 4, -kargs ...)
#   RMA_DEVICE, RMA_PORT, RMA_GID_INDEX, RMA_SPIN reach rmabench as usual.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/.cache/bin}
RXEVM=${RXEVM:-$BIN/rxevm}
OUT=${BENCH_OUT:-bench-results.json}
progress=off
[[ -t 2 ]] && progress=on # the guest's stderr is always a tty: decide here

tmp=$(mktemp "${OUT}.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086
"$RXEVM" ${RXEVM_ARGS:-} -- "$BIN/rmabench" -compare \
	-n "${BENCH_ITERS:-1000}" -nbw "${BENCH_RATE:-10000}" -bw-bytes "${BENCH_BYTES:-200MiB}" \
	-rounds "${BENCH_ROUNDS:-3}" -progress "$progress" ${BENCH_ARGS:-} -json - >"$tmp"
if ! grep -q '"name"' "$tmp"; then
	echo "bench: rmabench wrote no results" >&2
	exit 1
fi
mv "$tmp" "$OUT"
trap - EXIT
echo "bench: wrote $OUT ($(grep -c '"met": true' "$OUT") of $(grep -c '"target"' "$OUT") targets met)" >&2
