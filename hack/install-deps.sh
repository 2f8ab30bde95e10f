#!/usr/bin/env bash
# Installs what building this project needs on a Debian/Ubuntu host: a C
# compiler and libibverbs for cgo, and the rdma-core tools. The test VM
# (test/rxevm) installs what it needs itself (qemu, busybox, the kernel).
set -euo pipefail

need=()
command -v gcc >/dev/null || need+=(gcc)
[[ -e /usr/include/infiniband/verbs.h ]] || need+=(libibverbs-dev)
[[ -e /usr/include/rdma/rdma_cma.h ]] || need+=(librdmacm-dev)
command -v rping >/dev/null || need+=(rdmacm-utils)
dpkg -s ibverbs-providers >/dev/null 2>&1 || need+=(ibverbs-providers)
dpkg -s rdma-core >/dev/null 2>&1 || need+=(rdma-core)
command -v ibv_devinfo >/dev/null || need+=(ibverbs-utils)
command -v ib_write_lat >/dev/null || need+=(perftest)
command -v make >/dev/null || need+=(make)

if ((${#need[@]})); then
	sudo=""
	[[ $(id -u) == 0 ]] || sudo=sudo
	echo "install-deps: installing ${need[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "install-deps: Go 1.22 or later is required (https://go.dev/dl)"; exit 1; }
