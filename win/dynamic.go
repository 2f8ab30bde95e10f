package win

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
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

// dynamic holds a dynamic window's attached regions on this rank. The
// table of them in the sync page (read by peers with RDMA READ) is: a
// version, a count, then maxRegions entries of {addr, len, rkey, id}.
type dynamic struct {
	regions [maxRegions]attached
	version uint64
}

type attached struct {
	mem []byte
	mr  *verbs.MR
	pin runtime.Pinner
}

// Attach exposes mem in a dynamic window (MPI_Win_attach); other ranks
// address it with Address(mem) + offset. mem stays pinned until Detach.
// It is local, but other ranks may use the memory only after this rank has
// told them (with a barrier or a message) that it is attached.
func (w *Window) Attach(mem []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.flavor != FlavorDynamic {
		return fmt.Errorf("%w: Attach on a %v window", ErrInvalid, w.flavor)
	}
	if w.freed.Load() {
		return ErrFreed
	}
	if len(mem) == 0 {
		return fmt.Errorf("%w: Attach of no memory", ErrInvalid)
	}
	lo := uint64(Address(mem))
	free := -1
	for i := range w.dyn.regions {
		a := &w.dyn.regions[i]
		if a.mr == nil {
			if free < 0 {
				free = i
			}
			continue
		}
		alo := uint64(Address(a.mem))
		if lo < alo+uint64(len(a.mem)) && alo < lo+uint64(len(mem)) {
			return fmt.Errorf("%w: memory overlaps an attached region", ErrInvalid)
		}
	}
	if free < 0 {
		return fmt.Errorf("%w: more than %d regions attached", ErrInvalid, maxRegions)
	}
	a := &w.dyn.regions[free]
	a.pin.Pin(unsafe.SliceData(mem))
	access := verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if w.policy.UsesNIC() {
		access |= verbs.AccessRemoteAtomic
	}
	mr, err := w.f.Register(mem, access)
	if err != nil {
		a.pin.Unpin()
		return err
	}
	a.mem, a.mr = mem, mr
	w.target.AddWindow(w.regionID(free), mem)
	w.publish()
	return nil
}

// Detach stops exposing memory attached with Attach (MPI_Win_detach).
func (w *Window) Detach(mem []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.dyn.regions {
		a := &w.dyn.regions[i]
		if a.mr != nil && Address(a.mem) == Address(mem) && len(a.mem) == len(mem) {
			w.detach(i)
			w.publish()
			return nil
		}
	}
	return fmt.Errorf("%w: Detach of memory that is not attached", ErrInvalid)
}

func (w *Window) detach(i int) {
	a := &w.dyn.regions[i]
	w.target.RemoveWindow(w.regionID(i))
	a.mr.Close()
	a.pin.Unpin()
	*a = attached{}
}

func (w *Window) detachAll() {
	for i := range w.dyn.regions {
		if w.dyn.regions[i].mr != nil {
			w.detach(i)
		}
	}
}

// regionID is the engine's window id for attached region i.
func (w *Window) regionID(i int) uint32 { return 1<<31 | w.id<<8 | uint32(i) }

// publish writes the region table to the sync page.
func (w *Window) publish() {
	tab := w.syncMem[syncTable(len(w.remote)):]
	n := 0
	for i := range w.dyn.regions {
		a := &w.dyn.regions[i]
		if a.mr == nil {
			continue
		}
		e := tab[16+n*regionSize:]
		binary.LittleEndian.PutUint64(e[0:], a.mr.Addr())
		binary.LittleEndian.PutUint64(e[8:], uint64(len(a.mem)))
		binary.LittleEndian.PutUint32(e[16:], a.mr.RKey())
		binary.LittleEndian.PutUint32(e[20:], w.regionID(i))
		n++
	}
	w.dyn.version++
	binary.LittleEndian.PutUint64(tab[8:], uint64(n))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&tab[0])), w.dyn.version)
}

// dynLocate finds the attached region of rank holding address disp,
// reading rank's region table again if the cached one does not have it.
func (w *Window) dynLocate(ctx context.Context, rank, disp int) (region, int64, error) {
	t := &w.remote[rank]
	t.regMu.Lock()
	defer t.regMu.Unlock()
	for pass := 0; pass < 2; pass++ {
		for _, r := range t.regions {
			if uint64(disp) >= r.addr && uint64(disp)-r.addr <= uint64(r.size) {
				return r, int64(uint64(disp) - r.addr), nil
			}
		}
		if pass == 0 {
			if err := w.readTable(ctx, rank); err != nil {
				return region{}, 0, err
			}
		}
	}
	return region{}, 0, fmt.Errorf("%w: address %#x is in no region rank %d has attached", ErrOutOfWindow, disp, rank)
}

// readTable reads rank's region table with one RDMA READ.
func (w *Window) readTable(ctx context.Context, rank int) error {
	t := &w.remote[rank]
	buf := make([]byte, 16+maxRegions*regionSize)
	if err := w.f.Read(ctx, rank, buf, t.syncAddr+uint64(syncTable(len(w.remote))), t.syncRKey); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(buf[8:])
	if n > maxRegions {
		return fmt.Errorf("win: rank %d's region table says %d regions", rank, n)
	}
	t.regions = t.regions[:0]
	for i := 0; i < int(n); i++ {
		e := buf[16+i*regionSize:]
		t.regions = append(t.regions, region{
			addr: binary.LittleEndian.Uint64(e[0:]),
			size: int64(binary.LittleEndian.Uint64(e[8:])),
			rkey: binary.LittleEndian.Uint32(e[16:]),
			id:   binary.LittleEndian.Uint32(e[20:]),
		})
	}
	return nil
}
