package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/win"
)

// Sentinel errors; match them with errors.Is. Errors of package op (an op
// not allowed on the datatype or in a collective: op.ErrOpDatatype,
// op.ErrOpUse, op.ErrInvalid), of package win and the network
// (verbs.ErrPeerLost, ...), and the context's error pass through wrapped.
var (
	// ErrInvalid: a bad argument (buffer lengths, counts, root, options).
	ErrInvalid = errs.Refine("coll: invalid argument", errs.ErrInvalid)
	// ErrMismatch: the ranks do not call the same collective with the
	// same sizes (or root): detected from the header of a message.
	ErrMismatch = errors.New("coll: ranks disagree on the collective")
	// ErrBroken: an earlier collective failed part way (its context ended,
	// a peer was lost, the ranks disagreed), so the communicator's message
	// streams are out of step; only Close may be called.
	ErrBroken = errors.New("coll: communicator unusable after a failed collective")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("coll: communicator closed")
)

// Defaults and bounds of the transport and of the choice of algorithm.
const (
	// LongThreshold is the vector size in bytes from which the long-vector
	// algorithms may be used: the ring (reduce-scatter, then allgather or
	// gather) for Reduce, Allreduce and ReduceScatter with a commutative
	// op, and the pipelined chain for Scan, Exscan and non-commutative ops
	// when it beats the logarithmic algorithm (see the package
	// documentation). Measured on rxe: recursive doubling and the ring
	// take the same time for an Allreduce of 256 KiB on 4 and on 8 ranks;
	// below, recursive doubling is faster (2x at 16 KiB), above, the ring
	// (1.3x on 4 ranks and 1.7x on 8 at 1 MiB).
	LongThreshold = 256 << 10
	// DefaultSlotSize is the largest piece of a message written at once
	// into a peer's inbox slot; DefaultSlots the slots per ordered pair of
	// ranks (the credits of the flow control).
	DefaultSlotSize = 256 << 10
	DefaultSlots    = 2
	// DefaultMemory bounds the inbox memory of a rank: the slot size shrinks
	// (down to MinSlotSize) so that size x slots x slot size stays within it.
	DefaultMemory = 16 << 20
	MinSlotSize   = 4 << 10
)

// hdrSize is the size of the header at the start of every slot.
const hdrSize = 64

// Option configures a communicator. Every rank must pass the same options
// (New checks).
type Option func(*config)

type config struct {
	threshold int
	slotSize  int
	slots     int
	memory    int
}

// Threshold sets the vector size in bytes from which the ring algorithms
// are used for commutative ops (default LongThreshold; 0: always, where
// the op allows it; a negative value: never).
func Threshold(bytes int) Option { return func(c *config) { c.threshold = bytes } }

// SlotSize sets the size of an inbox slot, rounded down to a multiple of
// 64 bytes, from MinSlotSize to 1 GiB (default: DefaultSlotSize, shrunk to
// fit DefaultMemory on large groups); New refuses others with ErrInvalid.
func SlotSize(bytes int) Option { return func(c *config) { c.slotSize = bytes } }

// Slots sets the number of inbox slots per ordered pair of ranks, 1 to 64
// (default DefaultSlots; New refuses others with ErrInvalid): how many pieces of a message may be in flight
// before the receiver acknowledges the first.
func Slots(n int) Option { return func(c *config) { c.slots = n } }

func makeConfig(size int, opts []Option) (config, error) {
	c := config{threshold: LongThreshold, slots: DefaultSlots, memory: DefaultMemory}
	for _, o := range opts {
		o(&c)
	}
	if c.slots < 1 || c.slots > 64 {
		return c, fmt.Errorf("%w: %d slots per peer (want 1 to 64)", ErrInvalid, c.slots)
	}
	if c.slotSize == 0 {
		c.slotSize = min(DefaultSlotSize, max(MinSlotSize, c.memory/(size*c.slots)))
	}
	if c.slotSize < MinSlotSize || c.slotSize > 1<<30 {
		return c, fmt.Errorf("%w: slot size %d (want %d to 1 GiB)", ErrInvalid, c.slotSize, MinSlotSize)
	}
	c.slotSize &^= 63
	return c, nil
}

// memory is how a communicator reaches the inboxes: its own window memory,
// and writes into the peers'. The RDMA implementation is a window of
// package win; tests use plain memory.
type memory interface {
	// local is this rank's window memory, 8-byte aligned.
	local() []byte
	// put writes src at byte offset off of peer's memory; src may be
	// reused when it returns. Writes are complete at the peer after flush.
	put(ctx context.Context, src []byte, peer, off int) error
	flush(ctx context.Context, peer int) error
	// putWord writes the 8-byte word v at the aligned offset off of peer's
	// memory, in one piece; it need not be flushed.
	putWord(ctx context.Context, v uint64, peer, off int) error
	// alive is nil while peer's process is there, else why it is not.
	alive(peer int) error
	close(ctx context.Context) error
}

// Comm carries the reduction collectives over a group's RDMA connections.
// A Comm's collectives are called by every rank of the group in the same
// order, one at a time (calls from several goroutines are serialised);
// other RMA traffic on the group may go on meanwhile.
type Comm struct {
	mu         sync.Mutex
	rank, size int
	cfg        config
	mem        memory
	buf        []byte // mem.local()

	// The layout of every rank's window: flags[src][slot] (8 bytes each:
	// the sequence number of the chunk last written there), acks[peer]
	// (8 bytes: how many of this rank's chunks peer has consumed), then
	// the slots[src][slot], each a header and slotSize bytes of data.
	flagOff, ackOff, slotOff, slotStride int

	sent    []uint64 // chunks sent to each peer
	acked   []uint64 // acknowledgements seen from each peer
	recvd   []uint64 // chunks consumed from each peer
	seq     uint64   // collectives started
	broken  error
	closed  bool
	hdr     []byte   // hdrSize bytes, an allocation of its own (see winMemory)
	scratch []uint64 // reusable 8-byte-aligned work memory
}

func windowSize(size int, c config) int {
	_, _, slotOff, stride := layout(size, c)
	return slotOff + size*c.slots*stride
}

func layout(size int, c config) (flagOff, ackOff, slotOff, stride int) {
	ackOff = size * c.slots * 8
	slotOff = (ackOff + size*8 + 63) &^ 63
	return 0, ackOff, slotOff, hdrSize + c.slotSize
}

func newComm(rank, size int, cfg config, mem memory) *Comm {
	c := &Comm{rank: rank, size: size, cfg: cfg, mem: mem, buf: mem.local(),
		sent: make([]uint64, size), acked: make([]uint64, size), recvd: make([]uint64, size),
		hdr: make([]byte, hdrSize)}
	c.flagOff, c.ackOff, c.slotOff, c.slotStride = layout(size, cfg)
	return c
}

// New creates the communicator of g's collectives: a window (win.Allocate)
// holding an inbox for every peer, kept in a LockAll epoch until Close.
// It is collective over g, like window creation, and checks that every
// rank passed the same options. The inbox memory is size x slots x slot
// size bytes per rank (DefaultMemory by default on large groups).
func New(ctx context.Context, g *group.Group, opts ...Option) (*Comm, error) {
	cfg, err := makeConfig(g.Size(), opts)
	if err != nil {
		return nil, err
	}
	// Every rank must have the same layout and thresholds.
	mine := fmt.Sprintf("%d/%d/%d", cfg.threshold, cfg.slotSize, cfg.slots)
	all, err := g.AllGather(ctx, []byte(mine))
	if err != nil {
		return nil, err
	}
	for r, b := range all {
		if string(b) != mine {
			return nil, fmt.Errorf("%w: rank %d has options threshold/slot size/slots %s, rank %d %s", ErrInvalid, r, b, g.Rank(), mine)
		}
	}
	w, err := win.Allocate(ctx, g, windowSize(g.Size(), cfg), 1)
	if err != nil {
		return nil, err
	}
	if err := w.LockAll(ctx); err != nil {
		w.Free(ctx)
		return nil, err
	}
	return newComm(g.Rank(), g.Size(), cfg, &winMemory{w: w, word: make([]byte, 8)}), nil
}

// Close ends the communicator and frees its window. It is collective over
// the group (win.Window.Free), and may be called after ErrBroken.
func (c *Comm) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	return c.mem.close(ctx)
}

// Rank is this process's rank in the group, from 0.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of processes of the group.
func (c *Comm) Size() int { return c.size }

// winMemory is memory over a window of package win, in a LockAll epoch.
type winMemory struct {
	w    *win.Window
	word []byte
}

func (m *winMemory) local() []byte { return m.w.Bytes() }

func (m *winMemory) put(ctx context.Context, src []byte, peer, off int) error {
	return m.w.Put(ctx, src, peer, off)
}

func (m *winMemory) flush(ctx context.Context, peer int) error { return m.w.Flush(ctx, peer) }

func (m *winMemory) putWord(ctx context.Context, v uint64, peer, off int) error {
	binary.NativeEndian.PutUint64(m.word, v)
	return m.w.Put(ctx, m.word, peer, off) // copied before Put returns
}

func (m *winMemory) alive(peer int) error {
	g := m.w.Group()
	return fabric.OfGroup(g).PeerErr(grouphooks.FabricRank(g, peer))
}

func (m *winMemory) close(ctx context.Context) error {
	err := m.w.UnlockAll(ctx)
	if ferr := m.w.Free(ctx); err == nil {
		err = ferr
	}
	return err
}

// word returns the 8-byte word at off of this rank's memory.
func (c *Comm) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&c.buf[off]))
}

// work returns n bytes of reusable scratch memory, 8-byte aligned, valid
// until the next call. which selects one of two independent buffers.
func (c *Comm) work(n int) []byte {
	if w := len(c.scratch) * 8; w < n {
		c.scratch = make([]uint64, (n+7)/8)
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&c.scratch[0])), n)
}
