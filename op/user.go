package op

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onesided/rma/datatype"
)

// maxUser is the number of user-defined op values: FirstUser .. 255.
const maxUser = 256 - int(FirstUser)

// userChunk is the number of elements staged at a time through aligned
// buffers when a user op is applied to misaligned buffers.
const userChunk = 256

// userOp is a user-defined op: a function bound to one element type.
type userOp struct {
	name    string         // "" for a process-local op (Create)
	basic   datatype.Basic // the element type, datatype.Of[T]
	commute bool
	named   bool   // made by Register: usable in the accumulate family
	k       kernel // target = fn(in=origin, inout=target)
}

// accepts reports whether the op may be applied to elements of type b: its
// own type, and MPI_BYTE for an op on uint8 (the same memory).
func (u *userOp) accepts(b datatype.Basic) bool {
	return b == u.basic || u.basic == datatype.Uint8 && b == datatype.Byte
}

// The registry. Lookups (on every Apply and Check of a user op) are
// lock-free loads of one slot; Create, Register and Free serialise on
// userMu. Registered ops take slots from the bottom, in registration order,
// so that every process that registers the same names in the same order
// gives them the same values; process-local ops take slots from the top.
var (
	userTab   [maxUser]atomic.Pointer[userOp]
	userMu    sync.Mutex
	userNames = map[string]Op{} // under userMu
	nextNamed int               // under userMu: slot of the next Register
)

// lookup returns the user op o, or nil.
func lookup(o Op) *userOp {
	if o < FirstUser {
		return nil
	}
	return userTab[o-FirstUser].Load()
}

// Create makes a process-local user-defined op from fn (MPI_Op_create),
// for the reduction collectives (package coll) and the kernels of this
// package. fn combines in into inout element by element:
//
//	inout[i] = in[i] o inout[i]
//
// where o must be associative; commute says whether it is also
// commutative (if not, the collectives apply it in ascending rank order,
// the lower ranks' data being the left operand in). The op is bound to T:
// using it on another datatype is refused with [ErrOpDatatype] (an op on
// uint8 also accepts datatype.Byte). It cannot be used in the accumulate
// family (which needs the same op known on the target: see [Register]).
//
// fn is called with slices of equal length (never empty), which may be the
// very same slice, that it must not retain; it may be called from any
// goroutine, concurrently, and must not call back into this module's
// communication functions. Up to 128 user-defined ops may exist at once,
// Created and Registered together; [Free] releases a Created one.
func Create[T datatype.Element](fn func(in, inout []T), commute bool) (Op, error) {
	if fn == nil {
		return 0, &Error{Err: ErrInvalid, Msg: "Create: nil function"}
	}
	u := &userOp{basic: datatype.Of[T](), commute: commute, k: userKernel(fn)}
	userMu.Lock()
	defer userMu.Unlock()
	for i := maxUser - 1; i >= nextNamed; i-- {
		if userTab[i].Load() == nil {
			userTab[i].Store(u)
			return FirstUser + Op(i), nil
		}
	}
	return 0, &Error{Err: ErrInvalid, Msg: fmt.Sprintf("Create: all %d user-defined op values are in use", maxUser)}
}

// Register makes a named user-defined op from fn, like [Create], that may
// also be used in Accumulate, GetAccumulate, FetchAndOp and their
// request-based forms, through the target's active-message engine (an
// extension to MPI, where user-defined ops are not allowed in RMA). Such
// an accumulate sets each target element to
//
//	target[i] = origin[i] o target[i]      (fn(in=origin, inout=target))
//
// atomically per element with respect to the other accumulates the target
// applies, like a predefined op through the engine.
//
// The value of the op is its registration index: the n-th Register call
// of a process returns FirstUser+n-1. Every process of a group that uses
// the op must therefore register the same names, with the same element
// types, in the same order (before the op is used on them); a target that
// has not registered the value refuses the request (fallback.ErrUnknownOp),
// and one that bound it to another element type refuses it too
// ([ErrOpDatatype]). [RegistryDigest] helps to check that processes agree.
// Registered ops are never freed. The name must be new, not empty and not
// the name of a predefined op; it is what [Op.String] returns.
//
// fn runs on the target's engine goroutine, with the engine's lock held:
// it must be quick and must not call into this module. A panic in fn is
// recovered and reported as an error (see [Apply]). An op on int64 or
// uint64 is an exception: on a window whose 64-bit integers go to the
// NIC's atomics (package atomics' default routing), it is applied like MIN
// or MAX, by the origin in a loop of NIC compare-and-swaps, element by
// element, so that it stays atomic with the NIC's fetch-and-adds on the
// same word; fn then runs in the origin's calling goroutine, on one element
// at a time, as often as the loop needs, so it must be a pure function of
// its arguments.
func Register[T datatype.Element](name string, fn func(in, inout []T), commute bool) (Op, error) {
	if fn == nil {
		return 0, &Error{Err: ErrInvalid, Msg: fmt.Sprintf("Register %q: nil function", name)}
	}
	if name == "" {
		return 0, &Error{Err: ErrInvalid, Msg: "Register: empty name"}
	}
	for _, n := range opNames {
		if name == n {
			return 0, &Error{Err: ErrInvalid, Msg: fmt.Sprintf("Register %q: the name of a predefined op", name)}
		}
	}
	u := &userOp{name: name, basic: datatype.Of[T](), commute: commute, named: true, k: userKernel(fn)}
	userMu.Lock()
	defer userMu.Unlock()
	if o, ok := userNames[name]; ok {
		return 0, &Error{Op: o, Err: ErrInvalid, Msg: fmt.Sprintf("Register %q: already registered (value %d)", name, int(o))}
	}
	if nextNamed >= maxUser || userTab[nextNamed].Load() != nil {
		return 0, &Error{Err: ErrInvalid, Msg: fmt.Sprintf("Register %q: all %d user-defined op values are in use", name, maxUser)}
	}
	o := FirstUser + Op(nextNamed)
	userTab[nextNamed].Store(u)
	nextNamed++
	userNames[name] = o
	return o, nil
}

// Free releases a process-local op made by [Create] (MPI_Op_free); its
// value may then be reused by a later Create. Registered ops cannot be
// freed (their values must stay the same on every process). Free fails
// with [ErrInvalid] on anything else.
func Free(o Op) error {
	userMu.Lock()
	defer userMu.Unlock()
	u := lookup(o)
	switch {
	case u == nil:
		return &Error{Op: o, Err: ErrInvalid, Msg: fmt.Sprintf("Free: %v is not a user-defined op", o)}
	case u.named:
		return &Error{Op: o, Err: ErrInvalid, Msg: fmt.Sprintf("Free: %v is registered by name and cannot be freed", o)}
	}
	userTab[o-FirstUser].Store(nil)
	return nil
}

// Lookup returns the registered op of that name.
func Lookup(name string) (Op, bool) {
	userMu.Lock()
	defer userMu.Unlock()
	o, ok := userNames[name]
	return o, ok
}

// RegistryDigest is a hash of the registered ops of this process: their
// values, names, element types and commutativity, in order. Processes that
// registered the same ops in the same order have the same digest, so an
// application can compare it across ranks (with an all-gather) before it
// uses registered ops in accumulates.
func RegistryDigest() uint64 {
	userMu.Lock()
	defer userMu.Unlock()
	h := fnv.New64a()
	for i := 0; i < nextNamed; i++ {
		u := userTab[i].Load()
		fmt.Fprintf(h, "%d %q %d %t\n", i, u.name, u.basic, u.commute)
	}
	return h.Sum64()
}

// Registered reports whether o is a user-defined op made by [Register]
// in this process, so that it may be used in the accumulate family.
func (o Op) Registered() bool {
	u := lookup(o)
	return u != nil && u.named
}

// Basic returns the element type a user-defined op is bound to, or 0 for a
// predefined op or an undefined value.
func (o Op) Basic() datatype.Basic {
	if u := lookup(o); u != nil {
		return u.basic
	}
	return 0
}

// checkUser is Check for a value in the user range.
func checkUser(o Op, b datatype.Basic, use Use) error {
	u := lookup(o)
	switch {
	case u == nil:
		return &Error{Op: o, Basic: b, Use: use, Err: ErrInvalid,
			Msg: fmt.Sprintf("user-defined op %v is not defined in this process (neither registered nor created)", o)}
	case !b.Valid():
		return &Error{Op: o, Basic: b, Use: use, Err: ErrInvalid, Msg: fmt.Sprintf("%v: invalid datatype %v", o, b)}
	case !u.accepts(b):
		return &Error{Op: o, Basic: b, Use: use, Err: ErrOpDatatype,
			Msg: fmt.Sprintf("%v is not defined on %v (the user-defined op is bound to %v)", o, b, u.basic)}
	case !u.named && (use == Accumulate || use == GetAccumulate):
		return &Error{Op: o, Basic: b, Use: use, Err: ErrOpUse,
			Msg: fmt.Sprintf("%v cannot be used in %v: only ops made by Register are known to the target", o, use)}
	}
	return nil
}

// userKernelFor is kernelFor for a value in the user range.
func userKernelFor(o Op, b datatype.Basic) (kernel, error) {
	if u := lookup(o); u != nil && u.accepts(b) {
		return u.k, nil
	}
	return nil, checkUser(o, b, Collective)
}

// callUser runs a user op's kernel, turning a panic of the user's function
// into an error.
func callUser(o Op, b datatype.Basic, f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Error{Op: o, Basic: b, Err: ErrInvalid, Msg: fmt.Sprintf("user-defined op %v panicked: %v", o, r)}
		}
	}()
	f()
	return nil
}

// ReduceLocal combines in into inout with o, element by element
// (MPI_Reduce_local):
//
//	inout[i] = in[i] o inout[i]
//
// which for a user-defined op is fn(in, inout). o must be allowed in a
// collective on b (see [Check]: not REPLACE or NO_OP). The buffers are
// as for [Apply].
func ReduceLocal(o Op, b datatype.Basic, in, inout []byte) error {
	if err := Check(o, b, Collective); err != nil {
		return err
	}
	return Apply(o, b, inout, in)
}

// userKernel adapts fn to a kernel: target = fn(in=origin, inout=target).
// Aligned buffers are viewed in place (no allocation); misaligned ones are
// staged through aligned buffers from a pool. Bool buffers are always
// staged, so that fn only sees the bool values 0 and 1 whatever the bytes.
func userKernel[T datatype.Element](fn func(in, inout []T)) kernel {
	if bfn, ok := any(fn).(func(in, inout []bool)); ok {
		return boolKernel(bfn)
	}
	var z T
	size := int(unsafe.Sizeof(z))
	pool := &sync.Pool{New: func() any { return new([2][userChunk]T) }}
	return func(_ Op, t, s []byte) {
		if tt, ss, ok := view2[T](t, s); ok {
			fn(ss, tt)
			return
		}
		buf := pool.Get().(*[2][userChunk]T)
		tb := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), userChunk*size)
		sb := unsafe.Slice((*byte)(unsafe.Pointer(&buf[1])), userChunk*size)
		for len(t) > 0 {
			nb := min(len(t), len(tb))
			copy(tb, t[:nb])
			copy(sb, s[:nb])
			fn(buf[1][:nb/size], buf[0][:nb/size])
			copy(t[:nb], tb)
			t, s = t[nb:], s[nb:]
		}
		pool.Put(buf)
	}
}

func boolKernel(fn func(in, inout []bool)) kernel {
	pool := &sync.Pool{New: func() any { return new([2][userChunk]bool) }}
	return func(_ Op, t, s []byte) {
		buf := pool.Get().(*[2][userChunk]bool)
		for len(t) > 0 {
			n := min(len(t), userChunk)
			for i := 0; i < n; i++ {
				buf[0][i], buf[1][i] = t[i] != 0, s[i] != 0
			}
			fn(buf[1][:n], buf[0][:n])
			for i := 0; i < n; i++ {
				t[i] = b2i[uint8](buf[0][i])
			}
			t, s = t[n:], s[n:]
		}
		pool.Put(buf)
	}
}
