package fabric

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Completion handling: no goroutine of its own. A waiting goroutine polls
// the CQ for everyone (pollMu), spins for a while, then sleeps on the
// completion channel; the others wait for it to hand them their
// completion, or take over.

// pollLocked polls one batch and dispatches it; pollMu is held.
func (f *Fabric) pollLocked() int {
	n, err := f.cq.Poll(f.wcs[:])
	if err != nil {
		return 0
	}
	return f.dispatchLocked(n)
}

// dispatchLocked handles the n completions in f.wcs; pollMu is held. It
// takes no other lock.
func (f *Fabric) dispatchLocked(n int) int {
	for i := 0; i < n; i++ {
		wc := &f.wcs[i]
		id := uint32(wc.WRID)
		if int(id) >= len(f.slots) {
			continue
		}
		s := &f.slots[id]
		p := &f.peers[s.peer]
		if werr := wc.Err(); werr != nil {
			s.err = f.completionErr(int(s.peer), s.conn, werr)
		}
		if s.conn != nil {
			s.conn.completed.Add(1)
		}
		if s.async {
			if s.redo && s.err != nil && reissuable(s.err) {
				// Posted again by Flush once the pair is re-established;
				// until then it counts as in flight.
				p.mu.Lock()
				p.redo = append(p.redo, id)
				p.redoing.Store(true)
				p.mu.Unlock()
				continue
			}
			if s.err != nil && !s.msg {
				p.mu.Lock()
				if p.err == nil {
					p.err = s.err
				}
				p.mu.Unlock()
			}
			p.completed.Add(1)
			f.releaseSlot(id)
			continue
		}
		p.completed.Add(1)
		if !s.state.CompareAndSwap(slotBusy, slotDone) {
			f.releaseSlot(id) // the waiter gave up
			continue
		}
		if s.sleeping.Load() {
			select {
			case s.wake <- struct{}{}:
				f.woke = true
			default:
			}
		}
	}
	return n
}

// takeWoke reports whether the completions polled since the last call
// woke a waiter; pollMu is held. The poller then yields (after it
// unlocks pollMu) to let them run now, on its P, where the runtime queued
// them: while it spins they would wait for another P to steal them.
func (f *Fabric) takeWoke() bool {
	w := f.woke
	f.woke = false
	return w
}

// completionErr is the error a failed completion on c, to rank, gives its
// caller. It left c in the error state, and the pair is re-established. The
// transport's giving up (verbs.ErrPeerLost) is not the peer's death, which
// only the liveness evidence or a failed re-establishment tells (settled):
// until then the request's outcome is unknown.
func (f *Fabric) completionErr(rank int, c *conn, werr error) error {
	if err := f.peerErr(rank); err != nil {
		return err
	}
	f.fault(c)
	if errors.Is(werr, verbs.ErrFlushed) {
		return fmt.Errorf("fabric: rank %d: request cut short by a connection failure (the connection is re-established): %w: %w", rank, verbs.ErrOutcomeUnknown, werr)
	}
	if errors.Is(werr, verbs.ErrPeerLost) {
		return fmt.Errorf("fabric: rank %d: %w: %v (the connection is re-established)", rank, verbs.ErrOutcomeUnknown, werr)
	}
	return fmt.Errorf("fabric: rank %d: %w", rank, werr)
}

// reissuable reports whether a READ or WRITE that failed with err is to be
// posted again: its connection failed with its peer alive (a READ or WRITE
// applied twice has the effect of one).
func reissuable(err error) bool {
	return errors.Is(err, verbs.ErrOutcomeUnknown) && !errors.Is(err, ErrPeerLost)
}

// progressUntil drives completions until done reports true or ctx ends.
// s, if not nil, is the caller's slot, signalled when it completes.
func (f *Fabric) progressUntil(ctx context.Context, done func() bool, s *slot) error {
	spin := f.waitSpin()
	var spinStart time.Time
	empty := 0 // polls that found nothing; the clock is read every 64th
	for i := 0; ; i++ {
		if done() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.isClosing() {
			return errClosed
		}
		if f.pollMu.TryLock() {
			n := f.pollLocked()
			if n == 0 && !done() {
				empty++
				if empty&63 != 0 {
					// keep polling: reading the clock can cost more than a poll
				} else if spinStart.IsZero() {
					spinStart = time.Now()
				} else if time.Since(spinStart) > spin {
					err := f.sleepLocked(ctx, done)
					spinStart = time.Time{}
					if err != nil {
						f.pollMu.Unlock()
						return err
					}
				}
			} else {
				spinStart, empty = time.Time{}, 0
			}
			woke := f.takeWoke()
			f.pollMu.Unlock()
			if woke {
				runtime.Gosched()
			}
			procs.Polled()
			continue
		}
		// Another goroutine polls for everyone; wait to be woken or to take over.
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if s == nil {
			if i < 4096 {
				runtime.Gosched()
			} else {
				time.Sleep(50 * time.Microsecond)
			}
			continue
		}
		s.sleeping.Store(true)
		s.slept = true
		if done() {
			s.sleeping.Store(false)
			return nil
		}
		if s.timer == nil {
			s.timer = time.NewTimer(time.Millisecond)
		} else {
			s.timer.Reset(time.Millisecond)
		}
		select {
		case <-s.wake:
		case <-s.timer.C:
		case <-ctx.Done():
		}
		s.timer.Stop()
		s.sleeping.Store(false)
	}
}

// sleepLocked arms the CQ and sleeps on the channel until an event comes,
// or a slot or chunk is freed (wakePoller), or ctx ends.
func (f *Fabric) sleepLocked(ctx context.Context, done func() bool) error {
	// Announce the sleep before the last look at done: whoever makes it
	// true after that look sees the flag and wakes the channel.
	f.sleeping.Store(true)
	defer f.sleeping.Store(false)
	if err := f.cq.ReqNotify(); err != nil {
		return err
	}
	if f.pollLocked() > 0 || done() {
		return nil
	}
	return f.ch.Wait(ctx)
}

// wait waits for a synchronous slot and releases it, unless ctx ended first:
// then the slot is abandoned (its completion releases it) and abandoned is
// true. Call release after reading the slot's results.
func (f *Fabric) wait(ctx context.Context, id uint32) (abandoned bool, err error) {
	s := &f.slots[id]
	// One call in 16 is timed for opTime: reading the clock can cost
	// microseconds (an emulated timer), as much as the operation.
	var start time.Time
	timed := f.waits.Add(1)&15 == 0
	if timed {
		start = time.Now()
	}
	if err := f.progressUntil(ctx, func() bool { return s.state.Load() == slotDone }, s); err != nil {
		if s.state.CompareAndSwap(slotBusy, slotAbandoned) {
			return true, err
		}
	} else if timed {
		f.learnOpTime(time.Since(start))
	}
	if s.slept {
		s.slept = false
		select {
		case <-s.wake:
		default:
		}
	}
	return false, f.settled(ctx, int(s.peer), s.err)
}

// Settled is settled for the packages of this module: an error of a call
// to rank that may stand for rank's death becomes ErrPeerLost if it does.
func (f *Fabric) Settled(ctx context.Context, rank int, err error) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	return f.settled(ctx, rank, err)
}

// settled is err, the error of a failed completion of a request to rank,
// unless the failure was rank's death: then it is ErrPeerLost. A dying
// process's memory can go before its connections do, so that a request
// fails with a remote access error before its death is known. The failed
// pair is being re-established meanwhile: that succeeds if rank lives
// (err stands), and never if it died, whose liveness connection tells it
// within a peer timeout.
func (f *Fabric) settled(ctx context.Context, rank int, err error) error {
	if err == nil || rank == f.rank || errors.Is(err, ErrPeerLost) {
		return err
	}
	if _, uerr := f.use(ctx, rank); uerr != nil {
		if errors.Is(uerr, ErrPeerLost) {
			return uerr
		}
		return err
	}
	f.peers[rank].qmu.RUnlock()
	return err
}

// waitSpin is how long a waiter polls for a completion before it sleeps:
// Options.Spin, or twice the usual time a synchronous operation takes
// (opTime), whichever is longer, but at most the reply spin. Across hosts a
// round trip is longer than Spin, and sleeping on the completion channel
// would then add a wake-up to every operation.
func (f *Fabric) waitSpin() time.Duration {
	return max(f.spin, min(2*time.Duration(f.opTime.Load()), f.replySpin))
}

// learnOpTime folds d, the time a synchronous operation took, into opTime,
// an exponentially weighted average (weight 1/8). Times longer than the
// reply spin are not a round trip worth spinning for and are left out.
// Concurrent updates may lose one another; the average stays an average.
func (f *Fabric) learnOpTime(d time.Duration) {
	if d >= f.replySpin {
		return
	}
	old := f.opTime.Load()
	f.opTime.Store(old + (int64(d)-old)/8)
}
