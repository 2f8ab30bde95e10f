#!/usr/bin/env bash
# consumer.sh: use this module as a Go service would, from a module of its own.
#
# Creates a throwaway module (example.com/consumer) in a temporary directory
# outside this repository, requiring github.com/onesided/rma and replacing it
# with this checkout, with two programs:
#   cmd/readme  the program of README.md's "Use it in your module" section,
#               extracted from between its markers (so the README cannot rot)
#   cmd/api     calls the main exported API of the public packages (group,
#               win, op, datatype, coll, verbs, atomics, fallback; service has its
#               own integration tests) and checks
#               exact results: an exported API that only works from inside the
#               module (an internal type needed to call it, a missing export)
#               fails to compile here
# Then: go mod tidy, go build, go vet, CGO_ENABLED=0 go build (whose api
# binary must report verbs.ErrNotSupported from group.Join and pass every
# device-free check), and runs both programs on rxe with $NRANKS ranks under
# rmarun, inside the test VM (rxevm runs the command directly on a host that
# has an RDMA device). Either program exits non-zero on any wrong result.
#
# Environment: GO (go), BIN (.cache/bin: where rxevm and rmarun are, built by
# `make tools`), NRANKS (2), KEEP=1 to keep the temporary directory after a
# success (it is always kept after a failure). TMPDIR chooses where the
# directory is made; it must not be under /run, which the test VM hides.
set -euo pipefail

prog=${0##*/}
repo=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
BIN=${BIN:-$repo/.cache/bin}
RXEVM=$BIN/rxevm
RMARUN=$BIN/rmarun
NRANKS=${NRANKS:-2}
KEEP=${KEEP:-0}

die() {
	echo "$prog: error: $*" >&2
	exit 1
}

for t in "$RXEVM" "$RMARUN"; do
	[[ -x $t ]] || die "$t is missing: run make tools (or set BIN)"
done
GO=$(command -v "$GO") || die "no go command"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rma-consumer.XXXXXX")
tmp=$(cd "$tmp" && pwd -P)
case $tmp/ in
"$(cd "$repo" && pwd -P)"/*) die "temporary directory $tmp is inside the repository" ;;
/run/*) die "temporary directory $tmp is under /run, which the test VM hides: set TMPDIR" ;;
esac

ok=0
declare -a timings=()
start=${EPOCHREALTIME/./}
finish() {
	local rc=$?
	echo "== consumer: timings"
	printf '  %s\n' "${timings[@]}" "$(printf '%-34s %s' total "$(since "$start")")"
	if ((ok)) && [[ $KEEP != 1 ]]; then
		rm -rf "$tmp"
		echo "== consumer: passed (removed $tmp)"
	elif ((ok)); then
		echo "== consumer: passed; kept $tmp"
	else
		echo "== consumer: FAILED (exit $rc); kept $tmp" >&2
	fi
}
trap finish EXIT

# seconds since T0 (an $EPOCHREALTIME without its dot), to 0.1 s
since() {
	local us=$((${EPOCHREALTIME/./} - $1))
	printf '%d.%d s' $((us / 1000000)) $((us / 100000 % 10))
}

# step NAME CMD...: runs CMD in the temporary module and records its time.
step() {
	local name=$1
	shift
	echo "== consumer: $name"
	local t0=${EPOCHREALTIME/./}
	if ! (cd "$tmp" && "$@"); then
		timings+=("$(printf '%-34s FAILED after %s' "$name" "$(since "$t0")")")
		return 1
	fi
	timings+=("$(printf '%-34s %s' "$name" "$(since "$t0")")")
}

echo "== consumer: module example.com/consumer in $tmp"
gover=$(awk '$1 == "go" { print $2; exit }' "$repo/go.mod")
[[ -n $gover ]] || die "no go line in $repo/go.mod"
cat >"$tmp/go.mod" <<EOF
module example.com/consumer

go $gover

require github.com/onesided/rma v0.0.0

replace github.com/onesided/rma => $repo
EOF

# The README's program: the go block after the marker line.
mkdir -p "$tmp/cmd/readme" "$tmp/cmd/api"
awk -v marker='<!-- consumer.sh: cmd/readme/main.go -->' '
	$0 == marker { found++; want = 1; next }
	want && /^```go$/ { inblock = 1; want = 0; next }
	inblock && /^```$/ { inblock = 0; done = 1; next }
	inblock { print }
	END { if (found != 1 || !done) exit 1 }
' "$repo/README.md" >"$tmp/cmd/readme/main.go" ||
	die "README.md has no single marker line '<!-- consumer.sh: cmd/readme/main.go -->' followed by a go block"
[[ -s $tmp/cmd/readme/main.go ]] || die "the README's program is empty"

cat >"$tmp/cmd/api/main.go" <<'EOF'
// Command api uses the main exported API of the public packages of
// github.com/onesided/rma (service aside) from outside its module, and checks every result
// against the value MPI's semantics give. It exits 1 on any mismatch.
//
//	rmarun -n 2 ./api    on an RDMA device, 2 to 8 ranks
//	./api -nocgo         a build with CGO_ENABLED=0: no device needed
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

var (
	who    = "api"
	checks int
	failed int
)

// expect records one check.
func expect(ok bool, format string, args ...any) {
	checks++
	if !ok {
		failed++
		fmt.Fprintf(os.Stderr, "%s: FAIL: %s\n", who, fmt.Sprintf(format, args...))
	}
}

// eq checks got == want.
func eq[T comparable](what string, got, want T) {
	expect(got == want, "%s = %v, want %v", what, got, want)
}

// must stops the program on an error no later check could make sense of.
func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAIL: %s: %v\n", who, what, err)
		os.Exit(1)
	}
}

func main() {
	nocgo := flag.Bool("nocgo", false, "check a build without cgo: no device, every constructor fails with verbs.ErrNotSupported")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	local()
	if *nocgo {
		withoutCgo(ctx)
	} else {
		ranks(ctx)
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d of %d checks failed\n", who, failed, checks)
		os.Exit(1)
	}
	fmt.Printf("%s: all %d checks passed\n", who, checks)
}

// local checks what needs no device: op kernels and rules, datatypes,
// the active-message wire format and target, routing policies, and the
// pure parts of verbs.
func local() {
	// op: kernels, rules, errors, user-defined ops.
	target, origin := []int64{10, 20, -3}, []int64{1, 2, 3}
	must(op.Apply(op.Sum, datatype.Int64, datatype.AsBytes(target), datatype.AsBytes(origin)), "op.Apply")
	eq("op.Apply(SUM)", fmt.Sprint(target), "[11 22 0]")
	old := make([]int64, 3)
	must(op.ApplyFetch(op.Max, datatype.Int64, datatype.AsBytes(target), datatype.AsBytes([]int64{5, 50, -1}), datatype.AsBytes(old)), "op.ApplyFetch")
	eq("op.ApplyFetch(MAX) target", fmt.Sprint(target), "[11 50 0]")
	eq("op.ApplyFetch(MAX) old", fmt.Sprint(old), "[11 22 0]")
	err := op.Check(op.NoOp, datatype.Int32, op.Accumulate)
	expect(errors.Is(err, op.ErrOpUse), "op.Check(NO_OP, Accumulate) = %v, want op.ErrOpUse", err)
	var oe *op.Error
	expect(errors.As(err, &oe) && oe.Op == op.NoOp && oe.Use == op.Accumulate, "op.Check error %#v, want an *op.Error for NO_OP in Accumulate", oe)
	expect(errors.Is(op.Check(op.Maxloc, datatype.Float64, op.GetAccumulate), op.ErrOpDatatype), "op.Check(MAXLOC, float64) is not op.ErrOpDatatype")
	eq("op.Check(SUM, complex128, Collective)", op.Check(op.Sum, datatype.Complex128, op.Collective), nil)
	eq("op.Sum.String()", op.Sum.String(), "SUM")
	eq("len(op.Ops())", len(op.Ops()), 14)
	cas := []byte{7, 0}
	res := []byte{0}
	swapped, err := op.CompareAndSwap(datatype.Uint8, cas[:1], []byte{7}, []byte{9}, res)
	expect(err == nil && swapped && cas[0] == 9 && res[0] == 7, "op.CompareAndSwap: swapped %v err %v target %d old %d, want true <nil> 9 7", swapped, err, cas[0], res[0])
	prod, err := op.Create(func(in, inout []float64) {
		for i := range in {
			inout[i] *= in[i]
		}
	}, true)
	must(err, "op.Create")
	io := []float64{2, 3}
	must(op.ReduceLocal(prod, datatype.Float64, datatype.AsBytes([]float64{4, 5}), datatype.AsBytes(io)), "op.ReduceLocal")
	eq("op.ReduceLocal(user product)", fmt.Sprint(io), "[8 15]")
	expect(prod.IsUser() && !prod.Registered() && prod.Commutative(), "op.Create: IsUser %v Registered %v Commutative %v, want true false true", prod.IsUser(), prod.Registered(), prod.Commutative())
	expect(errors.Is(op.Check(prod, datatype.Float64, op.Accumulate), op.ErrOpUse), "a Created op is allowed in Accumulate")
	must(op.Free(prod), "op.Free")

	// datatype: constructors, extents, packing, encoding.
	eq("datatype.Of[float32]()", datatype.Of[float32](), datatype.Float32)
	vec, err := datatype.Vector(3, 1, 2, datatype.Float64.Type())
	must(err, "datatype.Vector")
	eq("Vector(3,1,2,float64).Size()", vec.Size(), int64(24))
	eq("Vector(3,1,2,float64).Extent()", vec.Extent(), int64(40))
	eq("Vector(3,1,2,float64).Blocks()", fmt.Sprint(vec.Blocks()), "[{0 1} {16 1} {32 1}]")
	expect(errors.Is(vec.Fits(1, 32, 0), datatype.ErrOutOfRange), "Vector(3,1,2,float64).Fits(1, 32, 0) is not ErrOutOfRange")
	eq("Vector(3,1,2,float64).Fits(1, 40, 0)", vec.Fits(1, 40, 0), nil)
	src := []float64{1, 2, 3, 4, 5}
	packed, err := datatype.AppendPack(nil, datatype.AsBytes(src), 1, vec)
	must(err, "datatype.AppendPack")
	vals, err := datatype.View[float64](packed)
	must(err, "datatype.View")
	eq("AppendPack(vector) values", fmt.Sprint(vals), "[1 3 5]")
	dst := make([]float64, 5)
	must(datatype.Unpack(datatype.AsBytes(dst), packed, 1, vec), "datatype.Unpack")
	eq("Unpack(vector)", fmt.Sprint(dst), "[1 0 3 0 5]")
	enc, err := vec.MarshalBinary()
	must(err, "Type.MarshalBinary")
	back, err := datatype.Unmarshal(enc)
	expect(err == nil && back.Equal(vec), "Unmarshal(MarshalBinary(vector)): %v, %v", back, err)
	_, err = datatype.Vector(-1, 1, 1, datatype.Int8.Type())
	expect(errors.Is(err, datatype.ErrInvalid), "Vector(-1, ...) = %v, want datatype.ErrInvalid", err)
	expect(datatype.SameSignature(3, datatype.Float64.Type(), 1, vec), "SameSignature(3 float64, vector of 3 float64) = false")
	pairs := []datatype.PairFloat64Int{{V: 1.5, I: 4}}
	eq("len(AsBytes([]PairFloat64Int))", len(datatype.AsBytes(pairs)), datatype.Float64Int.Size())

	// fallback: the active-message protocol in one process.
	window := []float64{1, 8, 3}
	tgt := fallback.NewTarget()
	tgt.AddWindow(7, datatype.AsBytes(window))
	replyBuf := make([]byte, 0, 64<<10) // the target writes replies of up to cap(replyBuf) bytes
	req := fallback.Request{Kind: fallback.KindGetAccumulate, Op: op.Max, Window: 7, Tag: 42,
		Disp: 0, Type: datatype.Float64.Type(), Count: 3, Data: datatype.AsBytes([]float64{2, 2, 2})}
	msg, err := fallback.AppendRequest(nil, &req)
	must(err, "fallback.AppendRequest")
	var rep fallback.Reply
	must(fallback.DecodeReply(tgt.Handle(msg, replyBuf), &rep), "fallback.DecodeReply")
	olds, _ := datatype.View[float64](append([]byte(nil), rep.Data...))
	expect(rep.Tag == 42 && rep.Err() == nil && fmt.Sprint(olds) == "[1 8 3]" && fmt.Sprint(window) == "[2 8 3]",
		"fallback GetAccumulate(MAX): tag %d err %v old %v window %v, want 42 <nil> [1 8 3] [2 8 3]", rep.Tag, rep.Err(), olds, window)
	req.Disp, req.Tag = 16, 43 // 3 elements from element 2: past the end
	msg, _ = fallback.AppendRequest(nil, &req)
	must(fallback.DecodeReply(tgt.Handle(msg, replyBuf), &rep), "fallback.DecodeReply")
	err = rep.Err()
	expect(errors.Is(err, fallback.ErrRemoteRejected) && errors.Is(err, fallback.ErrOutOfWindow) && tgt.Rejected() == 1,
		"fallback request outside the window: %v (rejected %d), want ErrRemoteRejected and ErrOutOfWindow, 1", err, tgt.Rejected())
	eq("fallback.KindAccumulate.String()", fallback.KindAccumulate.String(), "Accumulate")

	// atomics: routing policies and the byte-order probe.
	def := atomics.DefaultPolicy(true)
	eq("DefaultPolicy(nic).FetchAndOp(SUM, int64)", def.FetchAndOp(op.Sum, datatype.Int64), atomics.NICFetchAdd)
	eq("DefaultPolicy(nic).FetchAndOp(MAX, int64)", def.FetchAndOp(op.Max, datatype.Int64), atomics.NICCompareSwapLoop)
	eq("DefaultPolicy(nic).FetchAndOp(SUM, float64)", def.FetchAndOp(op.Sum, datatype.Float64), atomics.Engine)
	eq("DefaultPolicy(nic).CompareAndSwap(uint64)", def.CompareAndSwap(datatype.Uint64), atomics.NICCompareSwap)
	eq("DefaultPolicy(no nic).FetchAndOp(SUM, int64)", atomics.DefaultPolicy(false).FetchAndOp(op.Sum, datatype.Int64), atomics.Engine)
	eq("AnyOpPolicy().FetchAndOp(SUM, int64)", atomics.AnyOpPolicy().FetchAndOp(op.Sum, datatype.Int64), atomics.Engine)
	decl := atomics.DeclaredPolicy(true, []atomics.Pair{{Op: op.Sum, Basic: datatype.Int64}})
	expect(decl.Declared(op.Sum, datatype.Int64) && !decl.Declared(op.Max, datatype.Int64) && decl.Declared(op.NoOp, datatype.Float32),
		"DeclaredPolicy(SUM:int64).Declared: SUM %v MAX %v NO_OP %v, want true false true",
		decl.Declared(op.Sum, datatype.Int64), decl.Declared(op.Max, datatype.Int64), decl.Declared(op.NoOp, datatype.Float32))
	eq("atomics.NICFetchAdd.String()", atomics.NICFetchAdd.String(), "nic-fetch-add")
	eq("atomics.Usable(ATOMIC_NONE, nil)", atomics.Usable(verbs.AtomicNone, nil), false)
	eq("atomics.Usable(ATOMIC_HCA, nil)", atomics.Usable(verbs.AtomicHCA, nil), true)
	word := uint64(atomics.ProbeValue)
	eq("atomics.Probe(host order)", atomics.Probe(func(add uint64) (uint64, uint64, error) {
		o := word
		word += add
		return o, word, nil
	}), nil)
	err = atomics.Probe(func(add uint64) (uint64, uint64, error) {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], atomics.ProbeValue)
		o := binary.LittleEndian.Uint64(b[:])
		return o, o + add, nil
	})
	expect(errors.Is(err, verbs.ErrNotSupported), "atomics.Probe(swapped bytes) = %v, want verbs.ErrNotSupported", err)

	// verbs: what needs no device.
	gid := func(s ...byte) (g verbs.GID) { copy(g[16-len(s):], s); return }
	v4 := gid(0xff, 0xff, 10, 0, 0, 1)
	table := []verbs.GIDEntry{
		{Index: 0, GID: gid(0xfe, 0x80, 1), Type: verbs.GIDTypeRoCEv1},
		{Index: 1, GID: gid(0xfe, 0x80, 1), Type: verbs.GIDTypeRoCEv2},
		{Index: 2, GID: v4, Type: verbs.GIDTypeRoCEv2},
	}
	i, err := verbs.DefaultGIDIndex(table)
	expect(i == 2 && err == nil, "verbs.DefaultGIDIndex = %d, %v, want 2 (the RoCE v2 IPv4 GID)", i, err)
	eq("GID.String() of ::ffff:10.0.0.1", v4.String(), "10.0.0.1")
	eq("verbs.MTUFromBytes(1024)", verbs.MTUFromBytes(1024), verbs.MTU1024)
	ep := verbs.Endpoint{QPN: 0x123456, PSN: 0xabcdef, LID: 7, GID: v4, MTU: verbs.MTU4096}
	dec, err := verbs.DecodeEndpoint(ep.AppendBinary(nil))
	expect(err == nil && dec == ep, "verbs.DecodeEndpoint(AppendBinary(e)) = %+v, %v, want %+v", dec, err, ep)
	wc := verbs.WC{Status: verbs.WCRemAccessErr, WRID: 9}
	err = wc.Err()
	var ce *verbs.CompletionError
	expect(errors.Is(err, verbs.ErrRemoteAccess) && errors.As(err, &ce) && ce.WRID == 9,
		"WC{remote access error}.Err() = %v, want a *verbs.CompletionError matching verbs.ErrRemoteAccess", err)
	expect(errors.Is(win.ErrPeerLost, verbs.ErrPeerLost) && errors.Is(win.ErrNotSupported, verbs.ErrNotSupported),
		"win.ErrPeerLost and win.ErrNotSupported are not verbs.ErrPeerLost and verbs.ErrNotSupported")
	buf := make([]byte, 12)
	eq("win.Contiguous(12 bytes, int32).Count", win.Contiguous(buf, datatype.Int32).Count, 3)
}

// withoutCgo checks what a build without cgo gives: every constructor of
// verbs, and so group.Join, fails with verbs.ErrNotSupported.
func withoutCgo(ctx context.Context) {
	who = "api -nocgo"
	cgo := "?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				cgo = s.Value
			}
		}
	}
	eq("CGO_ENABLED of this build", cgo, "0")
	_, err := verbs.Open("")
	expect(errors.Is(err, verbs.ErrNotSupported), "verbs.Open without cgo = %v, want verbs.ErrNotSupported", err)
	_, err = group.Join(ctx, group.Options{Rank: 0, Size: 1})
	expect(errors.Is(err, verbs.ErrNotSupported) && errors.Is(err, win.ErrNotSupported),
		"group.Join without cgo = %v, want verbs.ErrNotSupported (= win.ErrNotSupported)", err)
	fmt.Printf("%s: group.Join: %v\n", who, err)
}

// Layout of the window of ranks(), in int64 words (8-byte displacement unit).
const (
	wFence   = 0  // Put by the left neighbour between fences
	wCounter = 1  // rank 0: FetchAndOp(SUM) counter
	wCAS     = 2  // rank 0: CompareAndSwap election
	wSlots   = 3  // rank 0: words 3..10, one per rank, Put and Get under an exclusive lock
	wFloats  = 16 // rank 0: 4 float64, Accumulate(SUM) (engine)
	wMax     = 24 // rank 0: float64, GetAccumulate(MAX) (engine)
	wUser    = 32 // rank 0: int64, Accumulate with a registered user-defined op (engine)
	wStrided = 40 // rank 0: words 40 and 42, AccumulateTo(SUM) with a vector datatype
	wPSCW    = 48 // rank 0: words 48..55, Put by rank r in a post/start epoch
	words    = 64
)

func ranks(ctx context.Context) {
	// A registered op must be registered by every rank in the same order
	// before it is used.
	maxAbs, err := op.Register("consumer.maxabs", func(in, inout []int64) {
		for i := range in {
			inout[i] = max(abs(in[i]), abs(inout[i]))
		}
	}, true)
	must(err, "op.Register")

	g, err := group.JoinEnv(ctx)
	must(err, "group.JoinEnv")
	rank, n := g.Rank(), g.Size()
	who = fmt.Sprintf("api rank %d", rank)
	if n < 2 || n > 8 {
		must(fmt.Errorf("%d ranks", n), "this check needs 2 to 8 ranks")
	}
	expect(g.Device() != "", "group.Device() is empty")
	eq("group.PortAttr().State", g.PortAttr().State, verbs.PortActive)
	all, err := g.AllGather(ctx, binary.LittleEndian.AppendUint64([]byte{byte(rank)}, op.RegistryDigest()))
	must(err, "group.AllGather")
	for r, b := range all {
		expect(len(b) == 9 && int(b[0]) == r, "AllGather entry %d = %v, want it to start with %d", r, b, r)
		eq(fmt.Sprintf("op.RegistryDigest of rank %d", r), binary.LittleEndian.Uint64(b[1:]), op.RegistryDigest())
	}
	nicAll := atomics.Usable(g.DeviceAttr().AtomicCap, g.NICAtomics())
	mine := []byte{0}
	if nicAll {
		mine[0] = 1
	}
	usable, err := g.AllGather(ctx, mine)
	must(err, "group.AllGather")
	for _, u := range usable {
		nicAll = nicAll && u[0] == 1
	}
	left, right := (rank+n-1)%n, (rank+1)%n

	w, err := win.Allocate(ctx, g, words*8, 8)
	must(err, "win.Allocate")
	eq("Info()", fmt.Sprintf("%+v", w.Info()), fmt.Sprintf("{AccumulateOps:same_op_no_op AccumulateOrdering:rar,raw,war,waw PackSmallBlocks:false Size:%d DispUnit:8}", words*8))
	eq("Flavor()", w.Flavor(), win.FlavorAllocate)
	wantRoute := atomics.Engine
	if nicAll {
		wantRoute = atomics.NICFetchAdd
	}
	eq("Route(SUM, int64)", w.Route(op.Sum, datatype.Int64), wantRoute)
	eq("Route(SUM, float64)", w.Route(op.Sum, datatype.Float64), atomics.Engine)
	wantUser := atomics.Engine // a user op on int64 goes where MAX does
	if nicAll {
		wantUser = atomics.NICCompareSwapLoop
	}
	eq("Route(consumer.maxabs, int64)", w.Route(maxAbs, datatype.Int64), wantUser)
	mem, err := datatype.View[int64](w.Bytes())
	must(err, "datatype.View(Bytes())")
	b8 := func(v int64) []byte { return binary.NativeEndian.AppendUint64(nil, uint64(v)) }

	err = w.Put(ctx, b8(1), right, wFence)
	expect(errors.Is(err, win.ErrEpoch), "Put outside an epoch = %v, want win.ErrEpoch", err)

	// Fence: a ring of Puts, then Gets.
	must(w.Fence(ctx, win.NoPrecede), "Fence")
	must(w.Put(ctx, b8(int64(1000+rank)), right, wFence), "Put in a fence epoch")
	must(w.Fence(ctx, 0), "Fence")
	eq("own word after fence (Put by the left neighbour)", mem[wFence], int64(1000+left))
	got := make([]byte, 8)
	must(w.Get(ctx, got, right, wFence), "Get in a fence epoch")
	must(w.Fence(ctx, win.NoSucceed), "Fence")
	eq("Get of the right neighbour's word", int64(binary.NativeEndian.Uint64(got)), int64(1000+rank))

	// Lock/Unlock: Put, Flush, Get back under an exclusive lock.
	must(w.Lock(ctx, win.LockExclusive, 0, 0), "Lock")
	err = w.Put(ctx, b8(1), n, 0)
	expect(errors.Is(err, win.ErrRank), "Put to rank %d = %v, want win.ErrRank", n, err)
	err = w.Put(ctx, b8(1), 0, words)
	expect(errors.Is(err, win.ErrOutOfWindow), "Put past the window = %v, want win.ErrOutOfWindow", err)
	must(w.Put(ctx, b8(int64(500+rank)), 0, wSlots+rank), "Put under a lock")
	must(w.Flush(ctx, 0), "Flush")
	must(w.Get(ctx, got, 0, wSlots+rank), "Get under a lock")
	eq("Get after Put and Flush", int64(binary.NativeEndian.Uint64(got)), int64(500+rank))
	must(w.Unlock(ctx, 0), "Unlock")

	// LockAll: the accumulate family and requests, all ranks at once.
	must(w.LockAll(ctx), "LockAll")
	_, err = win.FetchAndOp(ctx, w, int64(rank+1), 0, wCounter, op.Sum)
	must(err, "FetchAndOp")
	casOld := make([]byte, 8)
	must(w.CompareAndSwap(ctx, b8(int64(rank+1)), b8(0), casOld, datatype.Int64, 0, wCAS), "CompareAndSwap")
	must(w.Accumulate(ctx, datatype.AsBytes([]float64{1, float64(rank), 2, 0.5}), datatype.Float64, 0, wFloats, op.Sum), "Accumulate")
	maxOld := make([]byte, 8)
	must(w.GetAccumulate(ctx, datatype.AsBytes([]float64{float64(rank)}), maxOld, datatype.Float64, 0, wMax, op.Max), "GetAccumulate")
	must(w.Accumulate(ctx, b8(int64(-10*(rank+1))), datatype.Int64, 0, wUser, maxAbs), "Accumulate(registered op)")
	every2nd, err := datatype.Vector(2, 1, 2, datatype.Int64.Type())
	must(err, "datatype.Vector")
	must(w.AccumulateTo(ctx, win.Buffer{Data: datatype.AsBytes([]int64{1, int64(rank)}), Type: datatype.Int64.Type(), Count: 2},
		win.Region{Rank: 0, Disp: wStrided, Type: every2nd, Count: 1}, op.Sum), "AccumulateTo")
	rbufs := [][]byte{make([]byte, 8), make([]byte, 8)}
	reqs := make([]*win.Request, 2)
	reqs[0], err = w.RGet(ctx, rbufs[0], right, wFence)
	must(err, "RGet")
	reqs[1], err = w.RGet(ctx, rbufs[1], 0, wSlots+rank)
	must(err, "RGet")
	must(win.Waitall(ctx, reqs), "Waitall")
	expect(reqs[0] == nil && reqs[1] == nil, "Waitall left a request in the list")
	eq("RGet of the right neighbour's fence word", int64(binary.NativeEndian.Uint64(rbufs[0])), int64(1000+rank))
	eq("RGet of my slot", int64(binary.NativeEndian.Uint64(rbufs[1])), int64(500+rank))
	must(w.UnlockAll(ctx), "UnlockAll")
	wonB := []byte{0}
	if binary.NativeEndian.Uint64(casOld) == 0 {
		wonB[0] = 1
	}
	wins, err := g.AllGather(ctx, wonB) // also: every rank's calls are complete
	must(err, "AllGather")
	winners, winner := 0, -1
	for r, b := range wins {
		if b[0] == 1 {
			winners, winner = winners+1, r
		}
	}
	eq("CompareAndSwap winners", winners, 1)

	// Read rank 0's results back.
	must(w.LockAll(ctx), "LockAll")
	counter, err := win.FetchAndOp(ctx, w, int64(0), 0, wCounter, op.NoOp)
	must(err, "FetchAndOp(NO_OP)")
	eq("counter (sum of rank+1)", counter, int64(n*(n+1)/2))
	var view rma.Window = w.Target(0) // the contract both front doors share
	counter2, err := rma.FetchAndOp(ctx, view, int64(0), wCounter, op.NoOp)
	must(err, "rma.FetchAndOp(NO_OP) on w.Target(0)")
	eq("counter through rma.Window", counter2, counter)
	casWord, err := win.CompareAndSwap(ctx, w, int64(-1), int64(-2), 0, wCAS) // never equal: a read
	must(err, "CompareAndSwap")
	eq("CompareAndSwap word (winner's rank+1)", casWord, int64(winner+1))
	floats := make([]float64, 4)
	must(win.GetSlice(ctx, w, floats, 0, wFloats), "GetSlice")
	eq("Accumulate(SUM) float64 results", fmt.Sprint(floats), fmt.Sprint([]float64{float64(n), float64(n * (n - 1) / 2), float64(2 * n), float64(n) / 2}))
	maxv := make([]float64, 1)
	must(win.GetAccumulateSlice(ctx, w, nil, maxv, 0, wMax, op.NoOp), "GetAccumulateSlice(NO_OP)")
	eq("GetAccumulate(MAX) result", maxv[0], float64(n-1))
	user := make([]int64, 3)
	must(win.GetSlice(ctx, w, user, 0, wStrided), "GetSlice")
	eq("AccumulateTo(SUM, vector) words", fmt.Sprint(user), fmt.Sprint([]int64{int64(n), 0, int64(n * (n - 1) / 2)}))
	must(win.GetSlice(ctx, w, user[:1], 0, wUser), "GetSlice")
	eq("Accumulate(consumer.maxabs)", user[0], int64(10*n))
	must(w.UnlockAll(ctx), "UnlockAll")

	// Post/Start/Complete/Wait: every other rank Puts into rank 0.
	if rank == 0 {
		others := make([]int, 0, n-1)
		for r := 1; r < n; r++ {
			others = append(others, r)
		}
		must(w.Post(ctx, others, 0), "Post")
		must(w.Wait(ctx), "Wait")
		for r := 1; r < n; r++ {
			eq(fmt.Sprintf("word Put by rank %d in a post/start epoch", r), mem[wPSCW+r], int64(7000+r))
		}
	} else {
		must(w.Start(ctx, []int{0}, 0), "Start")
		must(win.PutSlice(ctx, w, []int64{int64(7000 + rank)}, 0, wPSCW+rank), "PutSlice")
		must(w.Complete(ctx), "Complete")
	}
	must(w.Free(ctx), "Free")
	expect(w.Bytes() == nil, "Bytes() after Free is not nil")

	// Create on the caller's memory, displacement unit 1: NIC atomics need
	// aligned targets.
	own := make([]byte, 64)
	wc, err := win.Create(ctx, g, own, 1, win.AccumulateOrdering(false))
	must(err, "win.Create")
	eq("Create: Info().AccumulateOrdering", wc.Info().AccumulateOrdering, "none")
	must(wc.LockAll(ctx), "LockAll")
	_, err = win.FetchAndOp(ctx, wc, int64(1), right, 3, op.Sum)
	if wc.Route(op.Sum, datatype.Int64).NIC() {
		expect(errors.Is(err, win.ErrAlignment), "NIC FetchAndOp at byte 3 = %v, want win.ErrAlignment", err)
	} else {
		expect(err == nil, "engine FetchAndOp at byte 3 = %v, want nil", err)
	}
	must(wc.UnlockAll(ctx), "UnlockAll")
	must(wc.Free(ctx), "Free")

	// Declared ops and any_op.
	wd, err := win.Allocate(ctx, g, 64, 8, win.AccumulateOps(atomics.Pair{Op: op.Sum, Basic: datatype.Int64}))
	must(err, "win.Allocate(AccumulateOps)")
	eq("AccumulateOps: Info().AccumulateOps", wd.Info().AccumulateOps, "SUM:int64")
	must(wd.LockAll(ctx), "LockAll")
	_, err = win.FetchAndOp(ctx, wd, int64(1), 0, 0, op.Max)
	expect(errors.Is(err, win.ErrUndeclared), "undeclared FetchAndOp(MAX) = %v, want win.ErrUndeclared", err)
	must(wd.UnlockAll(ctx), "UnlockAll")
	must(wd.Free(ctx), "Free")
	wa, err := win.Allocate(ctx, g, 64, 8, win.AnyOp())
	must(err, "win.Allocate(AnyOp)")
	eq("AnyOp: Route(SUM, int64)", wa.Route(op.Sum, datatype.Int64), atomics.Engine)
	must(wa.Free(ctx), "Free")

	// A typed window over a Go slice.
	s := make([]int32, 4)
	ws, err := win.CreateSlice(ctx, g, s)
	must(err, "win.CreateSlice")
	eq("CreateSlice: DispUnit()", ws.DispUnit(), 4)
	must(ws.Fence(ctx, win.NoPrecede), "Fence")
	must(win.PutSlice(ctx, ws, []int32{int32(rank), -1}, right, 1), "PutSlice")
	must(ws.Fence(ctx, win.NoSucceed), "Fence")
	eq("CreateSlice window after a Put from the left", fmt.Sprint(s), fmt.Sprint([]int32{0, int32(left), -1, 0}))
	must(ws.Free(ctx), "Free")

	// A dynamic window: attach, exchange addresses, Put, detach.
	wdyn, err := win.CreateDynamic(ctx, g)
	must(err, "win.CreateDynamic")
	eq("CreateDynamic: Flavor()", wdyn.Flavor(), win.FlavorDynamic)
	region := make([]byte, 16)
	must(wdyn.Attach(region), "Attach")
	addrs, err := g.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, uint64(win.Address(region))))
	must(err, "AllGather")
	must(wdyn.LockAll(ctx), "LockAll")
	must(wdyn.Put(ctx, b8(int64(3000+rank)), right, int(binary.LittleEndian.Uint64(addrs[right]))+8), "Put (dynamic)")
	must(wdyn.UnlockAll(ctx), "UnlockAll")
	must(g.Barrier(ctx), "Barrier")
	eq("dynamic window word 1 after a Put from the left", int64(binary.NativeEndian.Uint64(region[8:])), int64(3000+left))
	must(g.Barrier(ctx), "Barrier") // nobody uses region any more
	must(wdyn.Detach(region), "Detach")
	must(wdyn.Free(ctx), "Free")

	// coll: reductions over the group.
	c, err := coll.New(ctx, g)
	must(err, "coll.New")
	eq("Comm.Size()", c.Size(), n)
	sum := make([]int64, 2)
	must(coll.AllreduceOf(ctx, c, []int64{int64(rank), 1}, sum, op.Sum), "AllreduceOf")
	eq("AllreduceOf(SUM)", fmt.Sprint(sum), fmt.Sprint([]int64{int64(n * (n - 1) / 2), int64(n)}))
	mx := make([]float64, 1)
	must(coll.ReduceOf(ctx, c, []float64{float64(rank) * 1.5}, mx, op.Max, 0), "ReduceOf")
	if rank == 0 {
		eq("ReduceOf(MAX) at the root", mx[0], float64(n-1)*1.5)
	}
	scan := make([]int64, 1)
	must(coll.ScanOf(ctx, c, []int64{int64(rank + 1)}, scan, op.Sum), "ScanOf")
	eq("ScanOf(SUM)", scan[0], int64((rank+1)*(rank+2)/2))
	ex := make([]int64, 1)
	must(coll.ExscanOf(ctx, c, []int64{int64(rank + 1)}, ex, op.Sum), "ExscanOf")
	if rank > 0 {
		eq("ExscanOf(SUM)", ex[0], int64(rank*(rank+1)/2))
	}
	must(c.Close(ctx), "Comm.Close")

	// Split: even and odd ranks, in reverse order.
	sub, err := g.Split(ctx, rank%2, -rank)
	must(err, "Split")
	members := (n + 1 - rank%2) / 2
	eq("Split: subgroup size", sub.Size(), members)
	eq("Split: rank in the subgroup", sub.Rank(), members-1-rank/2)
	must(sub.Close(), "subgroup Close")

	// verbs on the group's device.
	devs, err := verbs.Devices()
	must(err, "verbs.Devices")
	expect(slices.ContainsFunc(devs, func(d verbs.DeviceInfo) bool { return d.Name == g.Device() }), "verbs.Devices() = %v, without %s", devs, g.Device())
	vc, err := verbs.Open(g.Device())
	must(err, "verbs.Open")
	attr, err := vc.QueryDevice()
	must(err, "QueryDevice")
	eq("QueryDevice().AtomicCap", attr.AtomicCap, g.DeviceAttr().AtomicCap)
	must(vc.Close(), "Context.Close")

	dev := g.Device()
	must(g.Close(), "group Close")
	fmt.Printf("%s: %d ranks on %s, NIC atomics %v\n", who, n, dev, nicAll)
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
EOF

export GOWORK=off
step "go mod tidy" env GOFLAGS=-mod=mod "$GO" mod tidy
step "go build" "$GO" build -o "$tmp/bin/" ./...
step "go vet" "$GO" vet ./...
step "CGO_ENABLED=0 go build" env CGO_ENABLED=0 "$GO" build -o "$tmp/bin-nocgo/" ./...
step "api -nocgo (host)" "$tmp/bin-nocgo/api" -nocgo
step "rxe: $NRANKS ranks of readme, api" "$RXEVM" -timeout 10m -- sh -c \
	"$RMARUN -n $NRANKS $tmp/bin/readme && $RMARUN -n $NRANKS $tmp/bin/api"
ok=1
