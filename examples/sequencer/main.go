// Command sequencer is the classic RDMA sequence-number service, in
// service mode: a server exposes one window holding a counter, and
// clients that come and go take ids from it with FetchAndOp(SUM, 1),
// which the server's NIC applies with no help from its CPU. Each client
// records every id it took in the id's slot with CompareAndSwap(0 -> its
// tag), so that an id handed out twice is caught; every few ids it
// updates a shared record under the window's exclusive lock (Get,
// modify, Put), and now and then reads the record under the shared lock
// and checks it. When the server stops, it checks that every id below the
// counter was recorded exactly once, that the record is consistent and
// that no client found a duplicate.
//
// Server:
//
//	RMA_SECRET=... sequencer -serve 10.0.0.1:7471 [-ids 65536] [-http 127.0.0.1:8080]
//	    [-stop-file F] [-max-holes N] [-addr-file F] [-window seq] [-secret-env RMA_SECRET]
//
// The server listens on a specific IP address of an RDMA device's network
// interface (port 0 picks one; -addr-file then says which, with lines
// "addr=IP:PORT" and "http=IP:PORT"), exposes a window for -ids ids and
// publishes its counters (Server.Stats) as expvar's "rma_service", and the
// next id as "sequencer_next_id", on -http's /debug/vars. It runs until
// SIGINT or SIGTERM, or until -stop-file exists, then prints
//
//	ids=N holes=H duplicates=D stray=S record_updates=U record_last=L connects=C disconnects=C lock_recoveries=R
//	slots_by_tag=TAG:COUNT,...
//
// and, when every check passes, "sequencer: every id handed out exactly
// once"; otherwise it exits with status 1. A hole is an id taken but never
// recorded: a client killed between its FetchAndOp and its CompareAndSwap
// leaves one, and -max-holes says how many the check allows (one per
// client that may have been killed).
//
// Client:
//
//	RMA_SECRET=... sequencer -dial 10.0.0.1:7471 [-tag T] [-n N] [-work D] [-record-every K]
//	    [-check-every C] [-hold D -hold-file F] [-http ADDR -addr-file F]
//
// A client takes ids until it has -n of them (0: until they run out),
// spending -work on each (as a real client would do something with it),
// updates the record under the exclusive lock every -record-every ids and
// checks it under the shared lock every -check-every ids, then prints
// "taken=N records=R checks=C". Its tag (default: its process id) must be
// nonzero and should differ from the other clients'. SIGINT or SIGTERM
// makes it stop after the id in hand (a second one cancels its calls).
// It publishes its counters (Client.Stats) as expvar's "rma_client", and
// its own as "sequencer", on -http's /debug/vars if -http is given. With
// -hold it sleeps that long inside its first record update, holding the
// exclusive lock (it writes -hold-file once it holds it), so that it can
// be killed there: the server frees the lock of a client whose connection
// goes, and the other clients go on.
//
// Window layout (int64 words, in bytes from the window's start): 0 the
// next id, 8 the duplicates found, 16 to 39 the record (updates, last id
// recorded, a check word of both), 64 onwards one slot per id.
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
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/onesided/rma"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Byte offsets in the window.
const (
	wordNext   = 0
	wordDups   = 8
	wordRecord = 16 // updates, last id, check
	slotBase   = 64
)

// check is the record's check word for its two other words (0 for the
// initial record, all zeros).
func check(updates, last int64) int64 { return updates*1_000_003 ^ last }

// serverFlags are the server's settings.
type serverFlags struct {
	addr, window, httpAddr, stopFile, addrFile string
	ids, maxHoles                              int
}

// clientFlags are a client's settings.
type clientFlags struct {
	addr, window, httpAddr, addrFile, holdFile string
	tag                                        int64
	n, recordEvery, checkEvery                 int
	work, hold                                 time.Duration
}

func main() {
	var s serverFlags
	var c clientFlags
	flag.StringVar(&s.addr, "serve", "", "run the server on this `ip:port` (a specific address; port 0 picks one)")
	flag.StringVar(&c.addr, "dial", "", "run a client of the server at this `host:port`")
	secretEnv := flag.String("secret-env", "RMA_SECRET", "the environment `variable` that holds the shared secret")
	window := flag.String("window", "seq", "the window's `name`")
	httpAddr := flag.String("http", "", "serve expvar's /debug/vars on this `address` (port 0 picks one)")
	addrFile := flag.String("addr-file", "", "write \"addr=IP:PORT\" (server) and \"http=IP:PORT\" lines to this `file` once listening")
	flag.IntVar(&s.ids, "ids", 65536, "server: ids to hand out (one slot each in the window)")
	flag.StringVar(&s.stopFile, "stop-file", "", "server: stop when this `file` exists")
	flag.IntVar(&s.maxHoles, "max-holes", 0, "server: ids taken but never recorded that the final check allows (at most one per killed client)")
	flag.Int64Var(&c.tag, "tag", int64(os.Getpid()), "client: the nonzero `tag` it writes in the slots of its ids")
	flag.IntVar(&c.n, "n", 0, "client: ids to take (0: until they run out)")
	flag.DurationVar(&c.work, "work", 0, "client: time spent on each id")
	flag.IntVar(&c.recordEvery, "record-every", 10, "client: update the record under the exclusive lock every this many ids")
	flag.IntVar(&c.checkEvery, "check-every", 25, "client: check the record under the shared lock every this many ids (0: never)")
	flag.DurationVar(&c.hold, "hold", 0, "client: hold the exclusive lock this long in its first record update")
	flag.StringVar(&c.holdFile, "hold-file", "", "client: with -hold, write this `file` once holding the lock")
	flag.Parse()
	s.window, c.window = *window, *window
	s.httpAddr, c.httpAddr = *httpAddr, *httpAddr
	s.addrFile, c.addrFile = *addrFile, *addrFile
	secret := os.Getenv(*secretEnv)
	var err error
	switch {
	case flag.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", flag.Args())
	case secret == "":
		err = fmt.Errorf("%s is not set: the server and its clients need a shared secret", *secretEnv)
	case s.addr != "" && c.addr == "":
		if s.ids <= 0 || s.maxHoles < 0 {
			err = errors.New("-ids must be positive and -max-holes not negative")
			break
		}
		err = server(s, []byte(secret))
	case c.addr != "" && s.addr == "":
		if c.tag == 0 || c.n < 0 || c.recordEvery <= 0 || c.checkEvery < 0 || c.work < 0 || c.hold < 0 {
			err = errors.New("-tag must be nonzero, -record-every positive, and -n, -check-every, -work and -hold not negative")
			break
		}
		err = client(c, []byte(secret))
	default:
		err = errors.New("give one of -serve and -dial")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sequencer:", err)
		os.Exit(1)
	}
}

// serveHTTP serves expvar's /debug/vars (registered on the default mux)
// on addr and returns the address it listens on.
func serveHTTP(addr string) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	go http.Serve(ln, nil)
	return ln.Addr().String(), func() { ln.Close() }, nil
}

// writeFile writes name whole, through a rename, so that a reader never
// sees it half written.
func writeFile(name, content string) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func server(f serverFlags, secret []byte) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mem, err := verbs.Alloc(slotBase + 8*f.ids)
	if err != nil {
		return err
	}
	defer verbs.Free(mem)
	srv, err := service.Listen(ctx, f.addr, service.ServerConfig{Secret: secret})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Expose(f.window, mem); err != nil {
		return err
	}
	// The words change under the NIC's atomics: read them atomically.
	word := func(off int) int64 { return atomic.LoadInt64((*int64)(unsafe.Pointer(&mem[off]))) }
	expvar.Publish("rma_service", expvar.Func(func() any { return srv.Stats() }))
	expvar.Publish("sequencer_next_id", expvar.Func(func() any { return word(wordNext) }))
	httpBound := ""
	if f.httpAddr != "" {
		a, closeHTTP, err := serveHTTP(f.httpAddr)
		if err != nil {
			return err
		}
		defer closeHTTP()
		httpBound = a
	}
	fmt.Printf("sequencer: serving %d ids in window %q on %v (expvar on %q)\n", f.ids, f.window, srv.Addr(), httpBound)
	if f.addrFile != "" {
		if err := writeFile(f.addrFile, fmt.Sprintf("addr=%v\nhttp=%s\n", srv.Addr(), httpBound)); err != nil {
			return err
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		if f.stopFile != "" {
			if _, err := os.Stat(f.stopFile); err == nil {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	st := srv.Stats()
	if err := srv.Close(); err != nil {
		return err
	}
	// Every client is disconnected: the memory is the server's alone now.
	slot := func(id int64) int64 { return int64(binary.NativeEndian.Uint64(mem[slotBase+8*id:])) }
	next := word(wordNext)
	handed := min(next, int64(f.ids))
	holes, stray := 0, 0
	byTag := map[int64]int{}
	for id := int64(0); id < int64(f.ids); id++ {
		switch tag := slot(id); {
		case id >= handed && tag != 0:
			stray++ // recorded, yet never handed out
		case tag == 0 && id < handed:
			holes++
		case tag != 0:
			byTag[tag]++
		}
	}
	dups := word(wordDups)
	updates, last, chk := word(wordRecord), word(wordRecord+8), word(wordRecord+16)
	fmt.Printf("ids=%d holes=%d duplicates=%d stray=%d record_updates=%d record_last=%d connects=%d disconnects=%d lock_recoveries=%d\n",
		handed, holes, dups, stray, updates, last, st.Connects, st.Disconnects, st.LockRecoveries)
	tags := make([]int64, 0, len(byTag))
	for t := range byTag {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	var b strings.Builder
	for i, t := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", t, byTag[t])
	}
	fmt.Printf("slots_by_tag=%s\n", b.String())
	switch {
	case dups != 0:
		return fmt.Errorf("clients found %d ids handed out twice", dups)
	case stray != 0:
		return fmt.Errorf("%d slots beyond the %d ids handed out are filled", stray, handed)
	case holes > f.maxHoles:
		return fmt.Errorf("%d ids were never recorded, more than the %d allowed", holes, f.maxHoles)
	case chk != check(updates, last):
		return fmt.Errorf("the record is inconsistent: updates %d, last %d, check %d", updates, last, chk)
	case updates > 0 && (last < 0 || last >= handed || slot(last) == 0):
		return fmt.Errorf("the record's last id %d was never recorded (%d ids handed out)", last, handed)
	}
	fmt.Println("sequencer: every id handed out exactly once")
	return nil
}

// progress is a client's own counters, published with expvar.
type progress struct {
	taken, records, checks atomic.Int64
	lastSeen               int64 // the record's updates the client last saw
}

func client(f clientFlags, secret []byte) error {
	// The first signal stops the client after the id in hand (no hole);
	// the second cancels its calls.
	var stopping atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		<-sigs
		stopping.Store(true)
		<-sigs
		cancel()
	}()

	cl, err := service.Dial(ctx, f.addr, service.ClientConfig{Secret: secret})
	if err != nil {
		return err
	}
	defer cl.Close()
	var p progress
	expvar.Publish("rma_client", expvar.Func(func() any { return cl.Stats() }))
	expvar.Publish("sequencer", expvar.Func(func() any {
		return map[string]int64{"Taken": p.taken.Load(), "Records": p.records.Load(), "Checks": p.checks.Load()}
	}))
	if f.httpAddr != "" {
		a, closeHTTP, err := serveHTTP(f.httpAddr)
		if err != nil {
			return err
		}
		defer closeHTTP()
		if f.addrFile != "" {
			if err := writeFile(f.addrFile, "http="+a+"\n"); err != nil {
				return err
			}
		}
	}
	w, err := cl.Open(ctx, f.window)
	if err != nil {
		return err
	}
	capacity := int64((w.Size() - slotBase) / 8)
	for taken := 0; (f.n == 0 || taken < f.n) && !stopping.Load(); {
		id, err := rma.FetchAndOp(ctx, w, int64(1), wordNext, op.Sum)
		if err != nil {
			return err
		}
		if id >= capacity {
			break // every id is handed out
		}
		old, err := rma.CompareAndSwap(ctx, w, int64(0), int64(f.tag), slotBase+8*int(id))
		if err != nil {
			return err
		}
		if old != 0 {
			if _, err := rma.FetchAndOp(ctx, w, int64(1), wordDups, op.Sum); err != nil {
				return err
			}
			return fmt.Errorf("id %d was handed out twice: its slot holds tag %d already", id, old)
		}
		taken++
		p.taken.Store(int64(taken))
		if f.work > 0 {
			time.Sleep(f.work)
		}
		if taken%f.recordEvery == 0 {
			hold := time.Duration(0)
			if p.records.Load() == 0 {
				hold = f.hold
			}
			if err := p.record(ctx, w, id, hold, f.holdFile); err != nil {
				return err
			}
		}
		if f.checkEvery > 0 && taken%f.checkEvery == 0 {
			if err := p.check(ctx, w); err != nil {
				return err
			}
		}
	}
	fmt.Printf("taken=%d records=%d checks=%d\n", p.taken.Load(), p.records.Load(), p.checks.Load())
	return nil
}

// readRecord reads the record and checks its check word, and that it did
// not go back since the client last saw it.
func (p *progress) readRecord(ctx context.Context, w *service.Window, rec *[24]byte) (updates int64, err error) {
	if err := w.Get(ctx, rec[:], wordRecord); err != nil {
		return 0, err
	}
	updates = int64(binary.NativeEndian.Uint64(rec[0:]))
	last := int64(binary.NativeEndian.Uint64(rec[8:]))
	if c := int64(binary.NativeEndian.Uint64(rec[16:])); c != check(updates, last) {
		return 0, fmt.Errorf("record inconsistent under the lock: updates %d, last %d, check %d", updates, last, c)
	}
	if updates < p.lastSeen {
		return 0, fmt.Errorf("record went back: %d updates, after %d", updates, p.lastSeen)
	}
	p.lastSeen = updates
	return updates, nil
}

// record adds one update to the record under the exclusive lock, holding
// the lock for hold first if hold is not 0.
func (p *progress) record(ctx context.Context, w *service.Window, id int64, hold time.Duration, holdFile string) error {
	if err := w.Lock(ctx, win.LockExclusive); err != nil {
		return err
	}
	var rec [24]byte
	updates, err := p.readRecord(ctx, w, &rec)
	if err == nil && hold > 0 {
		if holdFile != "" {
			err = writeFile(holdFile, "")
		}
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
	}
	if err == nil {
		binary.NativeEndian.PutUint64(rec[0:], uint64(updates+1))
		binary.NativeEndian.PutUint64(rec[8:], uint64(id))
		binary.NativeEndian.PutUint64(rec[16:], uint64(check(updates+1, id)))
		err = w.Put(ctx, rec[:], wordRecord)
	}
	if uerr := w.Unlock(ctx); err == nil {
		err = uerr
	}
	if err == nil {
		p.records.Add(1)
		p.lastSeen = updates + 1
	}
	return err
}

// check reads the record under the shared lock and checks it.
func (p *progress) check(ctx context.Context, w *service.Window) error {
	if err := w.Lock(ctx, win.LockShared); err != nil {
		return err
	}
	var rec [24]byte
	_, err := p.readRecord(ctx, w, &rec)
	if uerr := w.Unlock(ctx); err == nil {
		err = uerr
	}
	if err == nil {
		p.checks.Add(1)
	}
	return err
}
