package group

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/bootstrap"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Errors of the bootstrap, re-exported so callers can match them.
var (
	// ErrAuth: the shared secret was missing or rejected.
	ErrAuth = bootstrap.ErrAuth
	// ErrRankTaken: another process already joined with this rank.
	ErrRankTaken = bootstrap.ErrRankTaken
	// ErrConfig: rank, size, address or secret are missing or malformed.
	ErrConfig = bootstrap.ErrConfig
)

// ErrPeerLost: a member is lost (its process or its host died, or it
// closed the group during a collective). Collectives (Barrier, AllGather,
// Split, window creation and Free) and calls to the member fail with an
// error matching it: verbs.ErrPeerLost, the same as win.ErrPeerLost.
var ErrPeerLost = verbs.ErrPeerLost

// Options say who this process is and which RDMA device to use.
type Options struct {
	// Rank, Size, Addr (host:port of rank 0) and Secret as in the bootstrap;
	// FromEnv fills them from the environment.
	Rank, Size int
	Addr       string
	Secret     []byte

	// Device is the RDMA device name ("" = RMA_DEVICE, else the first device).
	Device string
	// Port is the device port (0 = 1).
	Port int
	// GIDIndex is the source GID index; it is used only when SetGIDIndex
	// is true, otherwise the RoCE v2 IPv4 GID is chosen (index 0 on InfiniBand).
	GIDIndex    int
	SetGIDIndex bool
	// MTU is the path MTU (0 = the port's active MTU).
	MTU verbs.MTU
	// Spin is the least time a waiting call polls for an RDMA completion
	// before sleeping on the completion channel (0 = 50us); a call polls
	// for twice the usual time of the process's operations if that is
	// longer (across hosts a round trip is), at most ReplySpin.
	Spin time.Duration
	// EngineSpin is the least time the engine polls for more active
	// messages after serving one before it sleeps (0 = 2ms); it polls for
	// three times the usual gap between requests if that is longer, at
	// most 16 x EngineSpin, so that a peer whose round trip is long finds
	// it awake. ReplySpin is how long a call polls for a reply before it
	// sleeps (0 = 5ms). Polling yields the CPU now and then; waking a
	// sleeping process can cost far more than a round trip.
	EngineSpin, ReplySpin time.Duration
	// PeerTimeout is how long a peer may stay silent before calls to it
	// fail with an error matching verbs.ErrPeerLost (0 = 1 s). A connection
	// that fails without its peer dying (a remote access error, say) is
	// re-established on both sides; if that takes longer than twice the
	// peer timeout plus a second, the peer is deemed lost.
	PeerTimeout time.Duration
	// Slots bounds the RDMA work requests in flight per process (0 = 256);
	// Chunks is the number of 64 KiB staging buffers that large transfers
	// go through (0 = 32). Calls beyond them wait for one to free.
	Slots, Chunks int
	// RecvBuffers is the number of 64 KiB buffers in the shared receive
	// queue where the requests of every peer to this process's engine, and
	// the replies to its own, arrive (0 = 64; a group of 2 keeps 48). A
	// burst beyond them waits in the senders' NICs (RNR retries), so
	// raise it for many ranks that accumulate into one at once.
	RecvBuffers int
}

// FromEnv reads the group's identity from the environment: RMA_RANK and
// RMA_SIZE (or the rank and size that mpirun (Open MPI, MPICH) and srun
// set), RMA_ADDR and RMA_SECRET (which no launcher but rmarun sets); and RMA_DEVICE, RMA_PORT, RMA_GID_INDEX, RMA_SPIN, RMA_ENGINE_SPIN, RMA_REPLY_SPIN, RMA_PEER_TIMEOUT,
// RMA_SLOTS, RMA_CHUNKS, RMA_RECV_BUFFERS.
func FromEnv() (Options, error) {
	cfg, err := bootstrap.ConfigFromEnv()
	if err != nil {
		return Options{}, err
	}
	o := Options{Rank: cfg.Rank, Size: cfg.Size, Addr: cfg.Addr, Secret: cfg.Secret, Device: os.Getenv("RMA_DEVICE")}
	if v := os.Getenv("RMA_PORT"); v != "" {
		if o.Port, err = strconv.Atoi(v); err != nil {
			return o, fmt.Errorf("group: %w: RMA_PORT=%q", ErrConfig, v)
		}
	}
	if v := os.Getenv("RMA_SPIN"); v != "" {
		if o.Spin, err = time.ParseDuration(v); err != nil || o.Spin <= 0 {
			return o, fmt.Errorf("group: %w: RMA_SPIN=%q is not a positive duration", ErrConfig, v)
		}
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"RMA_ENGINE_SPIN", &o.EngineSpin}, {"RMA_REPLY_SPIN", &o.ReplySpin}} {
		if v := os.Getenv(d.name); v != "" {
			if *d.to, err = time.ParseDuration(v); err != nil || *d.to <= 0 {
				return o, fmt.Errorf("group: %w: %s=%q is not a positive duration", ErrConfig, d.name, v)
			}
		}
	}
	if v := os.Getenv("RMA_PEER_TIMEOUT"); v != "" {
		if o.PeerTimeout, err = time.ParseDuration(v); err != nil || o.PeerTimeout <= 0 {
			return o, fmt.Errorf("group: %w: RMA_PEER_TIMEOUT=%q is not a positive duration", ErrConfig, v)
		}
	}
	for _, n := range []struct {
		name string
		to   *int
	}{{"RMA_SLOTS", &o.Slots}, {"RMA_CHUNKS", &o.Chunks}, {"RMA_RECV_BUFFERS", &o.RecvBuffers}} {
		if v := os.Getenv(n.name); v != "" {
			if *n.to, err = strconv.Atoi(v); err != nil || *n.to <= 0 || *n.to > 1<<20 {
				return o, fmt.Errorf("group: %w: %s=%q is not a count from 1 to 1048576", ErrConfig, n.name, v)
			}
		}
	}
	if v := os.Getenv("RMA_GID_INDEX"); v != "" {
		if o.GIDIndex, err = strconv.Atoi(v); err != nil {
			return o, fmt.Errorf("group: %w: RMA_GID_INDEX=%q", ErrConfig, v)
		}
		o.SetGIDIndex = true
	}
	return o, nil
}

// Group is a set of processes connected to each other by RDMA. Its methods
// are safe for concurrent use, except the collective ones (Barrier,
// AllGather, Split, Close, and window creation and Free), which every rank
// calls in the same order from one goroutine at a time. The collectives of
// different groups (a group and its subgroups) may run at once, from
// different goroutines, as MPI allows on different communicators.
//
// A collective call cut short by its context (or by a rank that failed)
// leaves the group's out-of-band connections broken: its later
// collectives fail, on every rank, and the group should be closed, as an
// MPI program aborts on an error of a collective. Give collectives a
// deadline that bounds a rank's failure to arrive, not a short one.
type Group struct {
	boot     *bootstrap.Conn
	fab      *fabric.Fabric
	probeErr error
	target   *fallback.Target // applies other ranks' accumulates to our windows
	client   *fallback.Client // our accumulates in flight
	windows  atomic.Uint32    // window ids handed out, in creation order
	live     *liveness
	// loss tells the collectives which members are lost: the fabric (a
	// stand-in in unit tests).
	loss lossSource

	secret []byte   // the bootstrap's, from which subgroups derive theirs
	splits *serials // subgroup serial numbers taken by this process
	serial uint32   // this group's (0 for one formed by Join)
	parent *Group   // the group Split made this one from
	world  []int    // rank -> rank in fab (nil: the same)
}

// Join forms the group: rank 0 listens on Addr, the others join it and
// prove they hold the secret; every pair of ranks opens a liveness
// connection, over which their RC queue pair is set up when first used.
// It returns when every rank has joined.
//
// A process with one P (GOMAXPROCS 1, the default on a one-CPU machine)
// gets a second one, unless the GOMAXPROCS environment variable set it:
// see "One CPU" in the package documentation.
func Join(ctx context.Context, o Options) (*Group, error) {
	procs.Ensure()
	boot, err := bootstrap.Join(ctx, bootstrap.Config{Rank: o.Rank, Size: o.Size, Addr: o.Addr, Secret: o.Secret})
	if err != nil {
		return nil, fmt.Errorf("group: %w", err)
	}
	gid := -1
	if o.SetGIDIndex {
		gid = o.GIDIndex
	}
	dev := o.Device
	if dev == "" {
		dev = os.Getenv("RMA_DEVICE")
	}
	fab, err := fabric.New(ctx, o.Rank, o.Size, boot, fabric.Options{
		Device: dev, Port: o.Port, GIDIndex: gid, MTU: o.MTU, Spin: o.Spin, PeerTimeout: o.PeerTimeout,
		EngineSpin: o.EngineSpin, ReplySpin: o.ReplySpin, Slots: o.Slots, Chunks: o.Chunks, RecvBuffers: o.RecvBuffers,
	})
	if err != nil {
		boot.Close()
		return nil, fmt.Errorf("group: rank %d: %w", o.Rank, err)
	}
	g := &Group{boot: boot, fab: fab, loss: fab, target: fallback.NewTarget(), client: fallback.NewClient(o.Size, fab.Credits()),
		secret: o.Secret, splits: new(serials)}
	fab.StartMessaging(fabric.Handlers{
		Request: func(_ int, req, reply []byte) []byte { return g.target.Handle(req, reply) },
		Reply:   g.client.OnReply,
		// A request to a lost rank ends its operation with the error,
		// as an error reply would.
		Fail: func(rank, credit int, err error) {
			call := g.client.Slot(rank, credit)
			if op := call.Op; op != nil {
				call.Op = nil
				op.Abort(err)
			}
		},
	})
	g.probeErr = g.probe(ctx)
	if errors.Is(g.probeErr, verbs.ErrResourceLimit) { // no locked memory left: no window could register either
		g.Close()
		return nil, fmt.Errorf("group: rank %d: %w", o.Rank, g.probeErr)
	}
	if err := g.startLiveness(ctx); err != nil {
		g.Close()
		return nil, err
	}
	if err := g.Barrier(ctx); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// probe checks, on the loopback connection, that NIC atomics work in host
// byte order.
func (g *Group) probe(ctx context.Context) error {
	if g.fab.DevAttr.AtomicCap == verbs.AtomicNone {
		return fmt.Errorf("group: %w: device %s has no remote atomics", verbs.ErrNotSupported, g.fab.DeviceName())
	}
	mem, err := verbs.Alloc(4096)
	if err != nil {
		return err
	}
	defer verbs.Free(mem)
	mr, err := g.fab.Register(mem, verbs.AccessRemoteAtomic|verbs.AccessRemoteRead)
	if err != nil {
		return err
	}
	defer mr.Close()
	word := (*uint64)(unsafe.Pointer(&mem[0]))
	*word = atomics.ProbeValue
	return atomics.Probe(func(add uint64) (uint64, uint64, error) {
		old, err := g.fab.FetchAdd(ctx, g.Rank(), mr.Addr(), mr.RKey(), add)
		return old, *word, err
	})
}

// JoinEnv joins the group the environment describes: Join with the
// options FromEnv reads (set by rmarun, mpirun or srun).
func JoinEnv(ctx context.Context) (*Group, error) {
	o, err := FromEnv()
	if err != nil {
		return nil, err
	}
	return Join(ctx, o)
}

// Rank is this process's rank, from 0.
func (g *Group) Rank() int { return g.boot.Rank() }

// Size is the number of processes.
func (g *Group) Size() int { return g.boot.Size() }

// Device is the name of the RDMA device in use.
func (g *Group) Device() string { return g.fab.DeviceName() }

// DeviceAttr describes the RDMA device in use.
func (g *Group) DeviceAttr() verbs.DeviceAttr { return g.fab.DevAttr }

// PortAttr describes the device port in use.
func (g *Group) PortAttr() verbs.PortAttr { return g.fab.PortAttr }

// NICAtomics reports whether the NIC's atomics passed the start-up probe
// (nil), or why they are not used.
func (g *Group) NICAtomics() error { return g.probeErr }

// Barrier returns when every rank has called it. It also orders this
// process's loads and stores of its window memory with the engine that
// applies other ranks' accumulates to it: what the engine applied before
// the barrier is visible after it, and stores made before it are seen by
// what the engine applies after it.
func (g *Group) Barrier(ctx context.Context) error {
	// Before: this rank's stores happen before whatever the engine applies
	// once another rank, released by the barrier, sends an accumulate.
	g.fab.SyncEngine()
	if err := g.overTCP(ctx, func(ctx context.Context) error { return g.boot.Barrier(ctx) }); err != nil {
		return fmt.Errorf("group: barrier: %w", err)
	}
	g.fab.SyncEngine()
	return nil
}

// AllGather gives every rank the bytes of every rank, indexed by rank. It
// orders window memory accesses with the engine as Barrier does.
func (g *Group) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	var all [][]byte
	g.fab.SyncEngine()
	err := g.overTCP(ctx, func(ctx context.Context) (err error) {
		all, err = g.boot.AllGather(ctx, mine)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("group: all-gather: %w", err)
	}
	g.fab.SyncEngine()
	return all, nil
}

// overTCP runs a collective over g's bootstrap connections so that a dead
// member fails it with ErrPeerLost as every other call to it does (see
// overTCPAmong).
func (g *Group) overTCP(ctx context.Context, call func(context.Context) error) error {
	return g.overTCPAmong(ctx, g.world, g.Size(), call)
}

// lossSource tells of lost peers: *fabric.Fabric.
type lossSource interface {
	// PeerErr is the error of calls to a fabric rank known lost, or nil.
	PeerErr(rank int) error
	// Losses is closed at the next loss after the call.
	Losses() <-chan struct{}
	PeerTimeout() time.Duration
}

// overTCPAmong runs call, a collective over TCP among the n ranks that
// world maps to ranks of the fabric (nil: ranks 0 to n-1), so that a dead
// one fails it with ErrPeerLost: at once if one is known lost; as soon as
// the RDMA connections or the liveness connections find one lost (a dead
// host closes no TCP connection), at every loss and not only the first;
// and when a member's TCP connection closes because its process died.
func (g *Group) overTCPAmong(ctx context.Context, world []int, n int, call func(context.Context) error) error {
	if err := lostAmong(g.loss, world, n, true); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watcher checks the members at each loss until call returns. A
	// member that left (closed the group) does not fail a collective in
	// progress: it may have left it done while others finish it.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			next := g.loss.Losses()
			if err := lostAmong(g.loss, world, n, false); err != nil {
				cancel(err)
				return
			}
			select {
			case <-next:
			case <-ctx.Done():
				return
			}
		}
	}()
	err := call(ctx)
	cause := context.Cause(ctx)
	cancel(nil)
	<-exited
	if err == nil {
		return nil
	}
	if errors.Is(cause, verbs.ErrPeerLost) {
		return cause
	}
	if errors.Is(err, bootstrap.ErrClosed) {
		// A member's process that died closed its connections: the
		// liveness connection tells it apart from a call abandoned
		// earlier, within a peer timeout.
		if lerr := awaitLoss(g.loss, world, n, g.loss.PeerTimeout()); lerr != nil {
			return lerr
		}
	}
	return err
}

// awaitLoss waits, at most d, until one of the n ranks world maps to the
// fabric's (nil: ranks 0 to n-1) is known lost, and returns its error; nil
// if none is by then.
func awaitLoss(src lossSource, world []int, n int, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		next := src.Losses()
		if err := lostAmong(src, world, n, true); err != nil {
			return err
		}
		select {
		case <-next:
		case <-t.C:
			return nil
		}
	}
}

// lostAmong is the error of calls to one of the n ranks world maps to the
// fabric's (nil: ranks 0 to n-1) known to be lost, or nil. One that left
// (fabric.ErrPeerLeft) counts only if left is true, and after one that
// died: the error names the cause of the failure, not a rank that
// finished and closed the group since.
func lostAmong(src lossSource, world []int, n int, left bool) error {
	var gone error
	for r := range n {
		fr := r
		if world != nil {
			fr = world[r]
		}
		if err := src.PeerErr(fr); err != nil {
			if !errors.Is(err, fabric.ErrPeerLeft) {
				return err
			}
			if left && gone == nil {
				gone = err
			}
		}
	}
	return gone
}

// Path is the device, port, GID and MTU the group's RDMA connections use.
func (g *Group) Path() verbs.Path { return g.fab.Path() }

// The packages of this module reach the group's RDMA connections through
// fabric.OfGroup, and its engine, window ids and ranks through
// grouphooks: their types are internal, or they are plumbing, so no
// exported method returns them.
func init() {
	fabric.OfGroup = func(g any) *fabric.Fabric { return g.(*Group).fab }
	grouphooks.Engine = func(g any) (*fallback.Target, *fallback.Client) { return g.(*Group).target, g.(*Group).client }
	grouphooks.NextWindowID = func(g any) uint32 { return g.(*Group).nextWindowID() }
	grouphooks.FabricRanks = func(g any) []int { return g.(*Group).world }
}

// nextWindowID is grouphooks.NextWindowID. The ids of a subgroup's windows
// carry the subgroup's serial number.
func (g *Group) nextWindowID() uint32 {
	const mask = 1<<windowBits - 1
	n := g.windows.Add(1)
	for n&mask == 0 {
		n = g.windows.Add(1)
	}
	return g.serial<<windowBits | n&mask
}

// Close releases the group's connections. Windows must be freed first, and
// subgroups made by Split closed; closing a subgroup closes only its own
// bootstrap connections. Once it is closed, calls of the group, of its
// subgroups and of windows and communicators left on it return an error
// matching verbs.ErrClosed; so do the calls in progress on other
// goroutines when Close begins, which Close wakes and waits for (a few
// milliseconds; at most three peer timeouts and a second) before it
// releases what they use.
func (g *Group) Close() error {
	if g.parent != nil {
		return g.boot.Close()
	}
	g.live.close()
	return errors.Join(g.fab.Close(), g.boot.Close())
}
