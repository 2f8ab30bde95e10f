//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGroupOf2(t *testing.T) { testGroup(t, 2) }
func TestGroupOf4(t *testing.T) { testGroup(t, 4) }

func testGroup(t *testing.T, n int) {
	l := newLaunch(t, "group", n)
	outs := l.run(2 * time.Minute)
	pids := map[string]bool{strconv.Itoa(os.Getpid()): true}
	for r, out := range outs {
		pid := value(t, out, "pid")
		if pids[pid] {
			t.Errorf("rank %d runs in pid %s, not a process of its own", r, pid)
		}
		pids[pid] = true
		value(t, out, "pairs")
		t.Logf("rank %d on device %s", r, value(t, out, "device"))
	}
}

func TestFetchAndOpCounter(t *testing.T) {
	l := newLaunch(t, "fadd", 4)
	outs := l.run(5 * time.Minute)
	total, err := strconv.Atoi(value(t, outs[0], "total"))
	if err != nil || total != 4*faddIters {
		t.Fatalf("total = %d (%v), want %d", total, err, 4*faddIters)
	}
	for r := range outs {
		b, err := os.ReadFile(l.file("olds." + strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 8*faddIters {
			t.Fatalf("rank %d returned %d old values, want %d", r, len(b)/8, faddIters)
		}
		prev := -1
		for i := 0; i < len(b); i += 8 {
			v := int(binary.LittleEndian.Uint64(b[i:]))
			if v <= prev {
				t.Fatalf("rank %d: old value %d after %d: not increasing", r, v, prev)
			}
			prev = v
		}
		t.Logf("rank %d: %s us per FetchAndOp", r, value(t, outs[r], "fetch_and_op_us"))
	}
	permutation(t, l, "olds", 4*faddIters)
}

func TestCompareAndSwapSpinLock(t *testing.T) {
	l := newLaunch(t, "spinlock", 4)
	outs := l.run(5 * time.Minute)
	if got := value(t, outs[0], "counter"); got != strconv.Itoa(4*lockIters) {
		t.Fatalf("counter = %s, want %d: updates were lost", got, 4*lockIters)
	}
	contended := 0
	for _, out := range outs {
		c, _ := strconv.Atoi(value(t, out, "contended"))
		contended += c
	}
	t.Logf("failed lock attempts: %d", contended)
}

func TestPutGet1MiB(t *testing.T) {
	l := newLaunch(t, "putget", 2)
	outs := l.run(5 * time.Minute)
	value(t, outs[1], "putget")
}

func TestBadInput(t *testing.T) {
	l := newLaunch(t, "badinput", 2)
	outs := l.run(2 * time.Minute)
	for _, out := range outs {
		value(t, out, "badinputs")
	}
}

// TestWrongSecret: a process with the wrong secret is refused with ErrAuth
// and the real group still forms.
func TestWrongSecret(t *testing.T) {
	l := newLaunch(t, "group", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rank0 := l.start(ctx, 0, l.secret)
	intruder := l.start(ctx, 1, "not-"+l.secret, "RMA_TEST_ROLE=intruder")
	l.wait([]*proc{intruder})
	if !strings.Contains(intruder.out.String(), "intruder refused") {
		t.Fatalf("intruder output: %s", intruder.out.String())
	}
	rank1 := l.start(ctx, 1, l.secret)
	l.wait([]*proc{rank0, rank1})
	value(t, rank0.out.String(), "pairs")
}
