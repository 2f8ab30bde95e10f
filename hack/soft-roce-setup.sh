#!/usr/bin/env bash
# soft-roce-setup.sh: create (or delete) a Soft-RoCE (rdma_rxe) device on a network device.
#
# Needs a kernel with rdma_rxe, and iproute2's `rdma` plus ibverbs-utils' `ibv_devices`.
# Run as root. Idempotent: if an rxe device already sits on the netdev, it says so and exits 0.
# test/rxevm runs this same script inside its qemu guest to create rxe0 on veth0.
set -euo pipefail

prog=${0##*/}
name=rxe0
teardown=0
netdev=

usage() {
	cat <<EOF
Usage: $prog [-n NAME] [NETDEV]
       $prog [-n NAME] --teardown

Create the Soft-RoCE device NAME (default rxe0) on the network device NETDEV
(default: the netdev of the default route), with
  rdma link add NAME type rxe netdev NETDEV
after loading the rdma_rxe module if needed, and check that ibv_devices lists it.
If an rxe device already exists on NETDEV, report it and exit 0.

  -n NAME       name of the RDMA device (default rxe0)
  --teardown    delete the device NAME (rdma link delete NAME)
  -h, --help    show this help
EOF
}

die() {
	echo "$prog: error: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
	-h | --help) usage; exit 0 ;;
	-n) [ $# -ge 2 ] || die "-n needs a NAME"; name=$2; shift 2 ;;
	-n*) name=${1#-n}; shift ;;
	--teardown) teardown=1; shift ;;
	--) shift; break ;;
	-*) usage >&2; die "unknown option $1" ;;
	*) break ;;
	esac
done
if [ $# -gt 0 ]; then
	netdev=$1
	shift
fi
[ $# -eq 0 ] || { usage >&2; die "too many arguments: $*"; }

for tool in rdma ip ibv_devices; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install iproute2 ibverbs-utils ibverbs-providers rdma-core)"
done

# links prints "DEVICE NETDEV" for each RDMA link, from lines like
# "link rxe0/1 state ACTIVE physical_state LINK_UP netdev veth0".
links() {
	rdma link show 2>/dev/null | awk '$1 == "link" {
		dev = $2; sub(/\/.*/, "", dev); nd = "-"
		for (i = 3; i < NF; i++) if ($i == "netdev") nd = $(i + 1)
		print dev, nd
	}'
}

# is_rxe DEVICE: rdma_rxe gives its devices a "parent" attribute (the netdev).
is_rxe() { [ -e "/sys/class/infiniband/$1/parent" ]; }

if [ "$teardown" = 1 ]; then
	if [ ! -e "/sys/class/infiniband/$name" ]; then
		echo "$prog: no RDMA device $name: nothing to delete"
		exit 0
	fi
	is_rxe "$name" || die "$name is not a Soft-RoCE (rxe) device: not deleting it"
	rdma link delete "$name" || die "rdma link delete $name failed"
	echo "$prog: deleted $name"
	exit 0
fi

if [ -z "$netdev" ]; then
	netdev=$(ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
	[ -n "$netdev" ] || die "no default route: give the network device, e.g. $prog eth0"
	echo "$prog: using $netdev, the netdev of the default route"
fi
[ -e "/sys/class/net/$netdev" ] || die "no network device $netdev"

if [ ! -e /sys/module/rdma_rxe ]; then
	command -v modprobe >/dev/null || die "rdma_rxe is not loaded and modprobe is missing (apt-get install kmod)"
	modprobe rdma_rxe || die "cannot load rdma_rxe: does this kernel have CONFIG_RDMA_RXE?"
fi

# Already there?
existing=$(links)
while read -r dev nd; do
	[ -n "$dev" ] || continue
	if [ "$dev" = "$name" ]; then
		[ "$nd" = "$netdev" ] || die "$name already exists, on netdev $nd, not $netdev (delete it with: $prog -n $name --teardown)"
		echo "$prog: $name already exists on $netdev: nothing to do"
		exit 0
	fi
	if [ "$nd" = "$netdev" ] && is_rxe "$dev"; then
		echo "$prog: rxe device $dev already exists on $netdev (wanted name $name): nothing to do"
		exit 0
	fi
done <<<"$existing"

rdma link add "$name" type rxe netdev "$netdev" ||
	die "rdma link add $name type rxe netdev $netdev failed (is crc32 available to the kernel crypto API? is $netdev up?)"

if ! ibv_devices | awk 'NR > 2 {print $1}' | grep -qx -- "$name"; then
	ibv_devices >&2 || true
	die "$name was created but ibv_devices does not list it (is the rxe provider of ibverbs-providers installed?)"
fi
echo "$prog: created RDMA device $name (Soft-RoCE) on $netdev"
