// Command sequencer is the classic RDMA sequence-number service, in
// service mode: a server exposes a window holding a counter, and clients
// that come and go take ids from it with FetchAndOp(SUM, 1), which the
// server's NIC applies with no help from its CPU. Each client records
// every id it took in the id's slot with CompareAndSwap(0 -> its tag), so
// an id handed out twice would be caught, and now and then updates a
// shared record under the window's exclusive lock. When the server stops
// it checks that every id below the counter was recorded exactly once (a
// client killed between taking an id and recording it leaves that id's
// slot empty: -max-holes says how many such holes are allowed) and that
// the record is consistent. It publishes its counters (Server.Stats, and
// the next id) through expvar.
//
//	RMA_SECRET=... sequencer -serve 10.0.0.1:7471 [-ids 60000] [-http 127.0.0.1:8080] [-stop-file F] [-max-holes N] [-addr-file F]
//	RMA_SECRET=... sequencer -dial 10.0.0.1:7471 -tag 7 [-n N] [-record-every 10] [-hold 5s -hold-file F]
//
// The server stops at SIGINT or SIGTERM, or when -stop-file exists, then
// prints "ids=N holes=H duplicates=D record_updates=U" and, when all is
// well, "sequencer: every id handed out exactly once"; it exits non-zero
// otherwise. A client takes ids until it has -n (0: until they run out),
// then prints "taken=N". With -hold it sleeps that long inside its first
// record update, holding the exclusive lock (writing -hold-file first), so
// that it can be killed there: the server frees the lock of a client whose
// connection goes, and the other clients go on.
//
// Window layout (int64 words): 0 the next id, 1 duplicates found, 2 to 4 the
// record (updates, last id recorded, a check of both), 8 onwards one slot
// per id.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

const (
	wordNext   = 0
	wordDups   = 8
	wordRecord = 16 // updates, last id, check
	slotBase   = 64
)

// check is the record's check word for its two other words (0 for the
// initial record, all zeros).
func check(updates, last int64) int64 { return updates*1_000_003 ^ last }

func main() {
	serve := flag.String("serve", "", "run the server on this `ip:port`")
	dial := flag.String("dial", "", "run a client of the server at this `host:port`")
	ids := flag.Int("ids", 60000, "server: ids to hand out (slots in the window)")
	httpAddr := flag.String("http", "", "server: serve expvar's /debug/vars on this `address`")
	stopFile := flag.String("stop-file", "", "server: stop when this `file` exists")
	maxHoles := flag.Int("max-holes", 0, "server: ids taken but never recorded that the final check allows (one per killed client)")
	addrFile := flag.String("addr-file", "", "server: write \"addr=IP:PORT\" and \"http=IP:PORT\" lines to this `file` once listening")
	tag := flag.Int64("tag", 1, "client: the nonzero tag it writes in the slots of its ids")
	n := flag.Int("n", 0, "client: ids to take (0: until they run out)")
	every := flag.Int("record-every", 10, "client: update the record under the exclusive lock every this many ids")
	hold := flag.Duration("hold", 0, "client: hold the exclusive lock this long in the first record update")
	holdFile := flag.String("hold-file", "", "client: with -hold, write this `file` once holding the lock")
	flag.Parse()
	secret := os.Getenv("RMA_SECRET")
	var err error
	switch {
	case secret == "":
		err = errors.New("RMA_SECRET is not set")
	case *serve != "" && *dial == "":
		err = server(*serve, []byte(secret), *ids, *httpAddr, *stopFile, *addrFile, *maxHoles)
	case *dial != "" && *serve == "":
		if *tag == 0 || *every <= 0 {
			err = errors.New("-tag must be nonzero and -record-every positive")
			break
		}
		err = client(*dial, []byte(secret), *tag, *n, *every, *hold, *holdFile)
	default:
		err = errors.New("give one of -serve and -dial")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sequencer:", err)
		os.Exit(1)
	}
}

func server(addr string, secret []byte, ids int, httpAddr, stopFile, addrFile string, maxHoles int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mem, err := verbs.Alloc(slotBase + 8*ids)
	if err != nil {
		return err
	}
	defer verbs.Free(mem)
	srv, err := service.Listen(ctx, addr, service.ServerConfig{Secret: secret})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Expose("seq", mem); err != nil {
		return err
	}
	// The words change under the NIC's atomics: read them atomically.
	word := func(off int) int64 { return atomic.LoadInt64((*int64)(unsafe.Pointer(&mem[off]))) }
	expvar.Publish("rma_service", expvar.Func(func() any { return srv.Stats() }))
	expvar.Publish("sequencer_next_id", expvar.Func(func() any { return word(wordNext) }))
	httpBound := ""
	if httpAddr != "" {
		ln, err := net.Listen("tcp", httpAddr)
		if err != nil {
			return err
		}
		defer ln.Close()
		httpBound = ln.Addr().String()
		go http.Serve(ln, nil) // expvar registers /debug/vars on the default mux
	}
	fmt.Printf("sequencer: serving %d ids on %v\n", ids, srv.Addr())
	if addrFile != "" {
		tmp := addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("addr=%v\nhttp=%s\n", srv.Addr(), httpBound)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, addrFile); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		if stopFile != "" {
			if _, err := os.Stat(stopFile); err == nil {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	st := srv.Stats()
	if err := srv.Close(); err != nil {
		return err
	}
	// Every client is gone: the memory is the server's alone now.
	handed := min(word(wordNext), int64(ids))
	holes := 0
	for i := int64(0); i < handed; i++ {
		if binary.NativeEndian.Uint64(mem[slotBase+8*i:]) == 0 {
			holes++
		}
	}
	dups := word(wordDups)
	updates, last, chk := word(wordRecord), word(wordRecord+8), word(wordRecord+16)
	fmt.Printf("ids=%d holes=%d duplicates=%d record_updates=%d connects=%d disconnects=%d lock_recoveries=%d\n",
		handed, holes, dups, updates, st.Connects, st.Disconnects, st.LockRecoveries)
	switch {
	case dups != 0:
		return fmt.Errorf("%d ids were handed out twice", dups)
	case holes > maxHoles:
		return fmt.Errorf("%d ids were never recorded, more than the %d allowed", holes, maxHoles)
	case chk != check(updates, last):
		return fmt.Errorf("the record is inconsistent: updates %d, last %d, check %d", updates, last, chk)
	}
	fmt.Println("sequencer: every id handed out exactly once")
	return nil
}

func client(addr string, secret []byte, tag int64, n, every int, hold time.Duration, holdFile string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := service.Dial(ctx, addr, service.ClientConfig{Secret: secret})
	if err != nil {
		return err
	}
	defer cl.Close()
	expvar.Publish("rma_client", expvar.Func(func() any { return cl.Stats() }))
	w, err := cl.Open(ctx, "seq")
	if err != nil {
		return err
	}
	capacity := int64((w.Size() - slotBase) / 8)
	taken, records := 0, 0
	for n == 0 || taken < n {
		id, err := w.FetchAndOp(ctx, 1, wordNext, op.Sum)
		if err != nil {
			return err
		}
		if id >= capacity {
			break // every id is handed out
		}
		old, err := w.CompareAndSwap(ctx, 0, tag, slotBase+8*int(id))
		if err != nil {
			return err
		}
		if old != 0 {
			if _, err := w.FetchAndOp(ctx, 1, wordDups, op.Sum); err != nil {
				return err
			}
			return fmt.Errorf("id %d was handed out twice: its slot holds tag %d", id, old)
		}
		taken++
		if taken%every == 0 {
			if err := record(ctx, w, id, records == 0 && hold > 0, hold, holdFile); err != nil {
				return err
			}
			records++
		}
	}
	fmt.Printf("taken=%d records=%d\n", taken, records)
	return nil
}

// record adds one update to the record under the exclusive lock.
func record(ctx context.Context, w *service.Window, id int64, hold bool, d time.Duration, holdFile string) error {
	if err := w.Lock(ctx, win.LockExclusive); err != nil {
		return err
	}
	var rec [24]byte
	err := w.Get(ctx, rec[:], wordRecord)
	if err == nil {
		updates := int64(binary.NativeEndian.Uint64(rec[0:]))
		last := int64(binary.NativeEndian.Uint64(rec[8:]))
		if c := int64(binary.NativeEndian.Uint64(rec[16:])); c != check(updates, last) {
			err = fmt.Errorf("record inconsistent under the exclusive lock: updates %d, last %d, check %d", updates, last, c)
		} else {
			if hold {
				if holdFile != "" {
					if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
						return err
					}
				}
				time.Sleep(d)
			}
			binary.NativeEndian.PutUint64(rec[0:], uint64(updates+1))
			binary.NativeEndian.PutUint64(rec[8:], uint64(id))
			binary.NativeEndian.PutUint64(rec[16:], uint64(check(updates+1, id)))
			err = w.Put(ctx, rec[:], wordRecord)
		}
	}
	if uerr := w.Unlock(ctx); err == nil {
		err = uerr
	}
	return err
}
