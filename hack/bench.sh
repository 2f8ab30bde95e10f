#!/usr/bin/env bash
# make bench: perftest against rmabench, in two runs, merged into one table
# and bench-results.json:
#  1. one host: in one boot of the test VM (or on the host's own RDMA
#     device), perftest and rmabench on the same device with the same
#     iterations (rmabench -compare, which forks its rank 0); with it, package
#     service against a server process of its own on the IPv4 address of
#     the device's netdev (rmabench -service, on by default there): rows
#     service/fetch_and_op/lat and service/compare_and_swap/lat (one client,
#     against ib_atomic_lat FETCH_AND_ADD and CMP_AND_SWAP, target <= 1.2x),
#     service/fetch_and_op/rate/1conn, 4conn, 16conn (FetchAndOp message
#     rate with 1, 4, 16 clients, beside ib_atomic_bw's) and
#     service/connect_first_op (Dial to first FetchAndOp, median of 20;
#     no perftest counterpart); and MPICH (rmabench -mpich): the program
#     cmd/rmabench/mpich/osclat.c, built here with mpicc.mpich, on 2 ranks
#     of mpiexec.mpich on the same device after perftest in each round:
#     rows named .../mpich, ours against MPICH's median (informational);
#  2. two hosts: in one boot of the test VM's two hosts (rxevm -hosts 2,
#     each guest with its own rxe0, joined by a UDP wire), perftest's server
#     and rmabench's rank 0 on host0 (10.77.0.1), perftest's client and
#     rank 1 on host1; rows named .../2host (no service rows).
#
#   RXEVM=.cache/bin/rxevm BIN=.cache/bin hack/bench.sh
#
# Environment (all optional):
#   BENCH_ITERS   latency iterations (perftest -n), default 1000
#   BENCH_RATE    message-rate iterations (ib_atomic_bw -n), default 10000
#   BENCH_BYTES   bytes per bandwidth case: ib_write_bw -n = BENCH_BYTES / 1 MiB, default 100MiB
#   BENCH_ROUNDS  rounds; the table compares the medians, default 3
#   BENCH_ITERS2, BENCH_BYTES2, BENCH_ROUNDS2  the same across two hosts,
#                 default 300, 16MiB, 3 (a round trip there takes ~1 ms)
#   BENCH_HOSTS   1: the one-host run only; 2: the two-host run only; default both
#   BENCH_MPICH   0: no rows against MPICH (default 1: mpich and
#                 libmpich-dev are installed with apt-get when absent)
#   BENCH_OUT     where the JSON goes, default bench-results.json
#   BENCH_ARGS    more rmabench flags for both runs (-q N -spin D ...)
#   RXEVM_ARGS    rxevm flags of the one-host run (-vm always, -smp 4, -kargs ...)
#   RXEVM2_ARGS   rxevm flags of the two-host run
#   RMA_DEVICE, RMA_PORT, RMA_GID_INDEX, RMA_SPIN reach rmabench as usual.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/.cache/bin}
RXEVM=${RXEVM:-$BIN/rxevm}
OUT=${BENCH_OUT:-bench-results.json}
HOSTS=${BENCH_HOSTS:-1,2}
progress=off
[[ -t 2 ]] && progress=on # the guest's stderr is always a tty: decide here

# MPICH for the rows against it: installed when absent, osclat built on the
# host (the guest sees the host's / read-only). When that fails, the rows
# say why and the bench goes on.
mpich=()
if [[ ${BENCH_MPICH:-1} != 0 && ,$HOSTS, == *,1,* ]]; then
	if ! command -v mpicc.mpich >/dev/null || ! command -v mpiexec.mpich >/dev/null; then
		sudo=""
		[[ $(id -u) == 0 ]] || sudo=sudo
		echo "bench: installing mpich libmpich-dev" >&2
		{ $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mpich libmpich-dev >/dev/null; } ||
			echo "bench: could not install mpich: the rows against MPICH will say so" >&2
	fi
	rm -f "$BIN/osclat"
	if command -v mpicc.mpich >/dev/null; then
		mpicc.mpich -O2 -Wall -o "$BIN/osclat" cmd/rmabench/mpich/osclat.c >&2 ||
			echo "bench: mpicc.mpich failed on cmd/rmabench/mpich/osclat.c" >&2
	fi
	mpich=(-mpich "$BIN/osclat")
fi

tmp=$(mktemp -d "${OUT}.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=()
files=()

if [[ ,$HOSTS, == *,1,* ]]; then
	echo "bench: one host: perftest and rmabench on one device" >&2
	t0=$SECONDS
	rc=0
	# shellcheck disable=SC2086
	"$RXEVM" -timeout 9m ${RXEVM_ARGS:-} -- "$BIN/rmabench" -compare \
		-n "${BENCH_ITERS:-1000}" -nbw "${BENCH_RATE:-10000}" -bw-bytes "${BENCH_BYTES:-100MiB}" \
		-rounds "${BENCH_ROUNDS:-3}" -progress "$progress" "${mpich[@]}" ${BENCH_ARGS:-} -json - >"$tmp/one.json" || rc=$?
	echo "bench: one host: exit $rc after $((SECONDS - t0)) s" >&2
	if grep -q '"name"' "$tmp/one.json"; then
		files+=("$tmp/one.json")
	fi
	[[ $rc == 0 ]] || failed+=("one host (exit $rc)")
fi

if [[ ,$HOSTS, == *,2,* ]]; then
	echo "bench: two hosts: perftest and rmabench across rxevm -hosts 2 (host0 10.77.0.1 serves, host1 drives)" >&2
	t0=$SECONDS
	rc=0
	# One rank per host; rank 0 listens on host0's address, its control
	# connection on the port after.
	args=(-compare -n "${BENCH_ITERS2:-300}" -bw-bytes "${BENCH_BYTES2:-16MiB}" -rounds "${BENCH_ROUNDS2:-3}" -progress off)
	# shellcheck disable=SC2086
	RMA_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n') RMA_SIZE=2 RMA_ADDR=10.77.0.1:18600 \
		"$RXEVM" -hosts 2 -timeout 5m -linger 30s ${RXEVM2_ARGS:-} -- \
		env RMA_RANK=0 "$BIN/rmabench" "${args[@]}" ${BENCH_ARGS:-} \
		::: env RMA_RANK=1 "$BIN/rmabench" "${args[@]}" ${BENCH_ARGS:-} -json - >"$tmp/two.out" || rc=$?
	echo "bench: two hosts: exit $rc after $((SECONDS - t0)) s" >&2
	# rxevm prefixes each line of a host's output with its name: rank 1's
	# stdout is the JSON.
	sed -n 's/^\[host1\] //p' "$tmp/two.out" >"$tmp/two.json"
	if grep -q '"name"' "$tmp/two.json"; then
		files+=("$tmp/two.json")
	fi
	[[ $rc == 0 ]] || failed+=("two hosts (exit $rc)")
fi

if [[ ${#files[@]} == 0 ]]; then
	echo "bench: rmabench wrote no results" >&2
	exit 1
fi
echo >&2
"$BIN/rmabench" -merge -json "$tmp/all.json" "${files[@]}"
mv "$tmp/all.json" "$OUT"
echo "bench: wrote $OUT ($(grep -c '"met": true' "$OUT") of $(grep -c '"target"' "$OUT") targets met)" >&2
if [[ ${#failed[@]} != 0 ]]; then
	echo "bench: failed: ${failed[*]}; $OUT holds the rows of the runs that finished" >&2
	exit 1
fi
