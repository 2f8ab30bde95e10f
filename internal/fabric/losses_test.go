package fabric

import (
	"sync"
	"testing"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestLossNotice: the channel of the next loss is the same until a loss,
// which closes it; a waiter taken after it gets a new one, open until the
// next loss; a loss with nobody waiting allocates nothing.
func TestLossNotice(t *testing.T) {
	var n lossNotice
	n.fire() // nobody waits: nothing to close
	a := n.next()
	if b := n.next(); b != a || closed(a) {
		t.Fatal("two waiters before a loss got different channels, or a closed one")
	}
	n.fire()
	if !closed(a) {
		t.Fatal("a loss did not close the waiters' channel")
	}
	b := n.next()
	if b == a || closed(b) {
		t.Fatal("a waiter after a loss got the closed channel")
	}
	n.fire()
	n.fire()
	if !closed(b) {
		t.Fatal("the second loss did not close the channel")
	}
	if allocs := testing.AllocsPerRun(100, n.fire); allocs != 0 {
		t.Errorf("a loss with nobody waiting allocates %v times", allocs)
	}
}

// TestLossNoticeConcurrent: waiters that take the channel, check a
// generation, then wait, see every loss (run with -race).
func TestLossNoticeConcurrent(t *testing.T) {
	var n lossNotice
	var mu sync.Mutex
	gen := 0
	const losses = 200
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := 0
			for seen < losses {
				c := n.next()
				mu.Lock()
				g := gen
				mu.Unlock()
				if g > seen {
					seen = g
					continue
				}
				<-c // a loss after the check closes c
			}
		}()
	}
	for range losses {
		mu.Lock()
		gen++
		mu.Unlock()
		n.fire()
	}
	wg.Wait()
}
