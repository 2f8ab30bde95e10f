package win

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// Address returns the displacement that names b[0] in a dynamic window
// (MPI_Get_address): its address. b must be attached for the address to
// be used by other ranks.
func Address(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// A dynamic window publishes the regions attached on a rank in a region
// table that other ranks read with RDMA READ.
//
// The table's head is in the window's sync page, at syncTable (regionHead
// bytes, little endian except the version):
//
//	+0  version   even when the table is stable, odd while it is rewritten (host byte order)
//	+8  count     regions attached
//	+16 address   of the entries
//	+24 rkey      of the entries (u32, then 4 bytes of padding)
//	+32 capacity  entries the buffer at address holds
//
// The entries, sorted by address and never overlapping, are in a buffer of
// their own, registered for remote read, that is replaced by one twice as
// large when it is full; each is regionSize bytes: {addr u64, len u64,
// rkey u32, id u32, 8 bytes of padding}.
//
// The target rewrites the table like a seqlock: version odd, entries and
// head, version even. An origin reads the version, the head, the version
// again (so that it never reads entries through a torn address and key),
// the entries, then the version a last time, and starts over if the version
// moved; so it never uses a half-written table. A replaced entry buffer
// stays registered until Free, because an origin may still be reading it:
// the buffers together hold less than twice the most regions attached at
// once.
//
// MPI lets an origin use attached memory once the target has told it (with
// a message or a barrier) that it attached it, in any epoch. So before an
// origin uses its copy of a target's table it reads the target's version
// word (one 8-byte RDMA READ, as Open MPI's osc/rdma reads its region-table
// id before each access), and reads the table again only when the version
// moved.
const (
	headCount    = 8
	headAddr     = 16
	headRKey     = 24
	headCapacity = 32

	minTableEntries = 4096 / regionSize
	// maxTableEntries bounds the regions attached at once on a rank (far
	// beyond the memory registrations a device allows) and what an origin
	// believes of a table's size.
	maxTableEntries = 1 << 24
)

// dynamic holds a dynamic window's state: the regions attached on this
// rank and their table, and the tables this rank last read from the others.
type dynamic struct {
	// mu serialises Attach, Detach and Free's release of the regions.
	// It is not the epoch calls' mutex: Attach and Detach are local
	// calls, which a goroutine waiting in Lock or Fence must not hold up.
	mu      sync.Mutex
	regions []*attached // sorted by address
	table   tableBuf    // the published entries
	old     []tableBuf  // replaced entry buffers, kept until Free

	once  sync.Once
	peers []peerTable // per rank
}

type attached struct {
	mem []byte
	mr  registration
	id  uint32 // the target engine's window id for it
	pin runtime.Pinner
}

func (a *attached) addr() uint64 { return uint64(Address(a.mem)) }

// tableBuf is a registered buffer of region table entries.
type tableBuf struct {
	mem []byte
	mr  registration
}

func (b *tableBuf) capacity() int { return len(b.mem) / regionSize }

func (b *tableBuf) release() {
	if b.mr != nil {
		b.mr.Close()
	}
	if b.mem != nil {
		verbs.Free(b.mem)
	}
	*b = tableBuf{}
}

// peerTable is an origin's copy of one target's region table.
type peerTable struct {
	mu      sync.Mutex
	valid   bool
	version uint64   // the (even) version regions was read at
	regions []region // sorted by address
	buf     []byte   // the entries as read
}

// Engine window ids of attached regions have the top bit set (window ids
// from the group's counter do not) and come from one counter for the
// process, so that no id is used twice in a window's life: an accumulate
// meant for a detached region can never land in another one. After 2^31
// attaches the counter wraps, skipping ids still attached.
var regionIDs struct {
	mu   sync.Mutex
	next uint32
	used map[uint32]struct{}
}

func newRegionID() uint32 {
	regionIDs.mu.Lock()
	defer regionIDs.mu.Unlock()
	if regionIDs.used == nil {
		regionIDs.used = make(map[uint32]struct{})
	}
	for {
		id := 1<<31 | regionIDs.next&(1<<31-1)
		regionIDs.next++
		if _, ok := regionIDs.used[id]; !ok {
			regionIDs.used[id] = struct{}{}
			return id
		}
	}
}

func freeRegionID(id uint32) {
	regionIDs.mu.Lock()
	delete(regionIDs.used, id)
	regionIDs.mu.Unlock()
}

// search returns the index of the first attached region whose address is
// greater than addr.
func (d *dynamic) search(addr uint64) int {
	lo, hi := 0, len(d.regions)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if d.regions[m].addr() <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Attach exposes mem in a dynamic window (MPI_Win_attach); other ranks
// address it with Address(mem) + offset. mem stays pinned until Detach.
// It is local: it waits neither for another rank nor for an epoch call
// (Lock, Fence, ...) that another goroutine is in. Other ranks may use the
// memory only after this rank has told them (with a barrier or a message)
// that it is attached; from then on they may, in any epoch. Any number of
// regions may be attached, also side by side; they must not overlap
// (ErrInvalid). An RMA call's target bytes must lie in one attached
// region, as MPI requires. Attach and Detach of no memory do nothing and
// succeed, as MPICH's do.
func (w *Window) Attach(mem []byte) error {
	w.dyn.mu.Lock()
	defer w.dyn.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if w.flavor != FlavorDynamic {
		return fmt.Errorf("%w: Attach on a %v window", ErrInvalid, w.flavor)
	}
	if len(mem) == 0 {
		return nil // as in MPICH: nothing to expose
	}
	d := &w.dyn
	lo := uint64(Address(mem))
	hi := lo + uint64(len(mem))
	i := d.search(lo)
	if i > 0 {
		if p := d.regions[i-1]; p.addr()+uint64(len(p.mem)) > lo {
			return fmt.Errorf("%w: Attach of %d bytes at %#x: they overlap the %d attached at %#x",
				ErrInvalid, len(mem), lo, len(p.mem), p.addr())
		}
	}
	if i < len(d.regions) {
		if n := d.regions[i]; n.addr() < hi {
			return fmt.Errorf("%w: Attach of %d bytes at %#x: they overlap the %d attached at %#x",
				ErrInvalid, len(mem), lo, len(n.mem), n.addr())
		}
	}
	if len(d.regions) >= maxTableEntries {
		return fmt.Errorf("%w: %d regions already attached on this rank", ErrNotSupported, len(d.regions))
	}
	if err := w.reserve(len(d.regions) + 1); err != nil {
		return err
	}
	a := &attached{mem: mem}
	a.pin.Pin(unsafe.SliceData(mem))
	mr, err := w.f.Register(mem, w.access)
	if err != nil {
		a.pin.Unpin()
		return err
	}
	a.mr = mr
	a.id = newRegionID()
	if err := w.target.AddWindow(a.id, mem); err != nil {
		freeRegionID(a.id)
		mr.Close()
		a.pin.Unpin()
		return err
	}
	d.regions = append(d.regions, nil)
	copy(d.regions[i+1:], d.regions[i:])
	d.regions[i] = a
	w.publish(i)
	return nil
}

// Detach stops exposing memory attached with Attach (MPI_Win_detach): the
// region attached at Address(mem), which must be len(mem) bytes long. When
// it returns no rank's RMA call touches the memory any more, provided, as
// MPI requires, that the ranks stopped using it before Detach was called.
// Like Attach, it is local.
func (w *Window) Detach(mem []byte) error {
	w.dyn.mu.Lock()
	defer w.dyn.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if w.flavor != FlavorDynamic {
		return fmt.Errorf("%w: Detach on a %v window", ErrInvalid, w.flavor)
	}
	if len(mem) == 0 {
		return nil // what Attach of no memory attached
	}
	d := &w.dyn
	lo := uint64(Address(mem))
	i := d.search(lo) - 1
	if i < 0 || d.regions[i].addr() != lo {
		return fmt.Errorf("%w: Detach of %d bytes at %#x, which are not attached", ErrInvalid, len(mem), lo)
	}
	a := d.regions[i]
	if len(a.mem) != len(mem) {
		return fmt.Errorf("%w: Detach of %d bytes at %#x, attached with %d", ErrInvalid, len(mem), lo, len(a.mem))
	}
	copy(d.regions[i:], d.regions[i+1:])
	d.regions[len(d.regions)-1] = nil
	d.regions = d.regions[:len(d.regions)-1]
	w.publish(i)
	w.release1(a)
	return nil
}

// release1 withdraws an attached region from the engine and the NIC.
func (w *Window) release1(a *attached) {
	w.target.RemoveWindow(a.id) // waits for an accumulate in progress on it
	freeRegionID(a.id)
	a.mr.Close()
	a.pin.Unpin()
	*a = attached{}
}

// detachAll releases every attached region and the region table, for Free.
func (w *Window) detachAll() {
	w.dyn.mu.Lock()
	defer w.dyn.mu.Unlock()
	d := &w.dyn
	for i, a := range d.regions {
		w.release1(a)
		d.regions[i] = nil
	}
	d.regions = nil
	d.table.release()
	for i := range d.old {
		d.old[i].release()
	}
	d.old = nil
}

// reserve makes the entry buffer hold at least n entries, replacing it by
// a larger one (with the entries copied) if needed. The head is updated by
// the next publish.
func (w *Window) reserve(n int) error {
	d := &w.dyn
	if n <= d.table.capacity() {
		return nil
	}
	c := max(d.table.capacity(), minTableEntries)
	for c < n {
		c *= 2
	}
	mem, err := verbs.Alloc(c * regionSize)
	if err != nil {
		return err
	}
	mr, err := w.f.Register(mem, verbs.AccessRemoteRead)
	if err != nil {
		verbs.Free(mem)
		return err
	}
	copy(mem, d.table.mem)
	if d.table.mem != nil {
		d.old = append(d.old, d.table)
	}
	d.table = tableBuf{mem: mem, mr: mr}
	return nil
}

// publish rewrites the table from entry from on, and its head.
func (w *Window) publish(from int) {
	d := &w.dyn
	head := w.syncMem[syncTable(len(w.remote)):]
	version := (*uint64)(unsafe.Pointer(&head[0]))
	// An atomic add, not a store: later stores cannot be made visible
	// before it, so a reader sees the version odd before any entry changes.
	atomic.AddUint64(version, 1)
	for i := from; i < len(d.regions); i++ {
		a := d.regions[i]
		e := d.table.mem[i*regionSize : (i+1)*regionSize]
		binary.LittleEndian.PutUint64(e[0:], a.mr.Addr())
		binary.LittleEndian.PutUint64(e[8:], uint64(len(a.mem)))
		binary.LittleEndian.PutUint32(e[16:], a.mr.RKey())
		binary.LittleEndian.PutUint32(e[20:], a.id)
	}
	binary.LittleEndian.PutUint64(head[headCount:], uint64(len(d.regions)))
	if d.table.mr != nil {
		binary.LittleEndian.PutUint64(head[headAddr:], d.table.mr.Addr())
		binary.LittleEndian.PutUint32(head[headRKey:], d.table.mr.RKey())
		binary.LittleEndian.PutUint64(head[headCapacity:], uint64(d.table.capacity()))
	}
	atomic.AddUint64(version, 1)
}

// peer returns this rank's copy of rank's region table.
func (w *Window) peer(rank int) *peerTable {
	w.dyn.once.Do(func() { w.dyn.peers = make([]peerTable, len(w.remote)) })
	return &w.dyn.peers[rank]
}

// version reads rank's region table version.
func (w *Window) version(ctx context.Context, rank int) (uint64, error) {
	off := syncTable(len(w.remote))
	if rank == w.rank {
		return atomic.LoadUint64(w.syncWord(off)), nil
	}
	t := &w.remote[rank]
	return w.f.Read8(ctx, rank, t.syncAddr+uint64(off), t.syncRKey)
}

// dynLocate finds the attached region of rank that holds the byte at
// address disp, or else one that ends at disp (for an access of no bytes),
// and the offset of disp in it. It first makes sure that its copy of
// rank's region table is at least as recent as the table rank had
// published when this call began.
func (w *Window) dynLocate(ctx context.Context, rank, disp int) (region, int64, error) {
	v, err := w.version(ctx, rank)
	if err != nil {
		return region{}, 0, err
	}
	p := w.peer(rank)
	p.mu.Lock()
	defer p.mu.Unlock()
	// An odd version is a publish under way: the table before it is the
	// one this rank may have been told about.
	if !p.valid || p.version < v&^1 {
		if err := w.readTable(ctx, rank, p, v); err != nil {
			return region{}, 0, err
		}
	}
	a := uint64(disp)
	lo, hi := 0, len(p.regions)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.regions[m].addr <= a {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 0 {
		r := p.regions[lo-1]
		if off := a - r.addr; off <= uint64(r.size) {
			return r, int64(off), nil
		}
	}
	return region{}, 0, fmt.Errorf("%w: address %#x is in no region rank %d has attached", ErrOutOfWindow, disp, rank)
}

// readTable reads rank's region table into p; v is a version of it just read.
func (w *Window) readTable(ctx context.Context, rank int, p *peerTable, v uint64) error {
	for i := 0; ; i++ {
		if v&1 == 0 {
			done, next, err := w.tryReadTable(ctx, rank, p, v)
			if done || err != nil {
				return err
			}
			v = next
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
		if v&1 != 0 {
			var err error
			if v, err = w.version(ctx, rank); err != nil {
				return err
			}
		}
	}
}

// tryReadTable reads rank's table if it is still at version v (even). It
// returns false and the version it found if the table changed meanwhile.
func (w *Window) tryReadTable(ctx context.Context, rank int, p *peerTable, v uint64) (bool, uint64, error) {
	t := &w.remote[rank]
	headAt := t.syncAddr + uint64(syncTable(len(w.remote)))
	var head [regionHead - 8]byte
	if err := w.f.Read(ctx, rank, head[:headCapacity], headAt+8, t.syncRKey); err != nil {
		return false, 0, err
	}
	if now, err := w.version(ctx, rank); err != nil || now != v {
		return false, now, err
	}
	// The head is as published at version v.
	n := binary.LittleEndian.Uint64(head[headCount-8:])
	addr := binary.LittleEndian.Uint64(head[headAddr-8:])
	rkey := binary.LittleEndian.Uint32(head[headRKey-8:])
	capacity := binary.LittleEndian.Uint64(head[headCapacity-8:])
	if n > capacity || capacity > maxTableEntries {
		return false, 0, fmt.Errorf("win: rank %d's region table says %d regions in room for %d", rank, n, capacity)
	}
	size := int(n) * regionSize
	if cap(p.buf) < size {
		p.buf = make([]byte, size)
	}
	buf := p.buf[:size]
	if size > 0 {
		if err := w.f.Read(ctx, rank, buf, addr, rkey); err != nil {
			return false, 0, err
		}
	}
	if now, err := w.version(ctx, rank); err != nil || now != v {
		return false, now, err
	}
	p.regions = p.regions[:0]
	end := uint64(0)
	for i := 0; i < int(n); i++ {
		e := buf[i*regionSize:]
		r := region{
			addr: binary.LittleEndian.Uint64(e[0:]),
			size: int64(binary.LittleEndian.Uint64(e[8:])),
			rkey: binary.LittleEndian.Uint32(e[16:]),
			id:   binary.LittleEndian.Uint32(e[20:]),
		}
		if r.size <= 0 || r.addr < end || r.addr+uint64(r.size) < r.addr {
			p.valid = false
			return false, 0, fmt.Errorf("win: rank %d's region table has region %d of %d bytes at %#x out of order", rank, i, r.size, r.addr)
		}
		end = r.addr + uint64(r.size)
		p.regions = append(p.regions, r)
	}
	p.version, p.valid = v, true
	return true, v, nil
}

// locateLayout is locate for a target layout: on a dynamic window it finds
// the region that holds the layout's first byte, which is not the byte at
// t.Disp when the datatype's true lower bound is not zero, and returns the
// offset of t.Disp from that region's start (negative if t.Disp is before it).
func (w *Window) locateLayout(ctx context.Context, t *Region) (region, int64, error) {
	if w.flavor != FlavorDynamic {
		return w.locate(ctx, t.Rank, t.Disp)
	}
	lo, hi, err := t.Type.Bounds(t.Count)
	if err != nil || lo == hi {
		lo = 0 // the caller's check of the layout reports it
	}
	first := int64(t.Disp) + lo
	if (lo > 0) != (first > int64(t.Disp)) {
		return region{}, 0, fmt.Errorf("%w: displacement %d plus the datatype's lower bound %d overflows", ErrOutOfWindow, t.Disp, lo)
	}
	reg, off, err := w.dynLocate(ctx, t.Rank, int(first))
	return reg, off - lo, err
}
