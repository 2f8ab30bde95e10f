package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/verbs"
)

// -compare across two hosts: each process is one rank of a group of 2
// (RMA_RANK, RMA_SIZE=2, RMA_ADDR, RMA_SECRET), rank 0 on one host and rank
// 1 on the other. Rank 0 runs perftest's servers and serves its window;
// rank 1 runs perftest's clients against rank 0's host and drives the
// operations. Each perftest test runs with no group in either process
// (nothing of ours then runs beside perftest on the hosts' CPUs); then the
// ranks form the group, run the cases compared with that test and close
// the group, before the next test. Rank 1 tells rank 0 what to do over a
// control connection of its own, to rank 0's -control address,
// authenticated with RMA_SECRET.

// Rows across hosts: the name of the matching one-host row with hostSuffix.
const hostSuffix = "/2host"

var crossTargets = []target{
	{name: "fetch_and_op_sum_int64" + hostSuffix, metric: metricLatency, op: "fetch_and_op", kase: "fetch_and_op_sum_int64", size: 8, pt: ptFetchAdd, column: "t_typical[usec]", max: 1.20},
	{name: "compare_and_swap_int64" + hostSuffix, metric: metricLatency, op: "compare_and_swap", kase: "compare_and_swap_int64", size: 8, pt: ptCmpSwap, column: "t_typical[usec]", max: 1.20},
	{name: "get_8B" + hostSuffix, metric: metricLatency, op: "get", kase: "get_8B", size: 8, pt: ptReadLat, column: "t_typical[usec]", max: 1.20},
	{name: "accumulate_sum_float64_1_flush" + sendRTT + hostSuffix, metric: metricLatency, op: "accumulate", kase: "accumulate_sum_float64_8B", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2, max: 1.30},
	{name: "get_accumulate_sum_float64_1" + sendRTT + hostSuffix, metric: metricLatency, op: "get_accumulate", kase: "get_accumulate_sum_float64_8B", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2, max: 1.30},
}

var crossExtras = []target{
	{name: "put_8B_flush" + hostSuffix, metric: metricLatency, op: "put", kase: "put_8B", size: 8, pt: ptReadLat, column: "t_typical[usec]"},
	{name: "put_8B_flush/write_lat" + hostSuffix, metric: metricLatency, op: "put", kase: "put_8B", size: 8, pt: ptWriteLat, column: "t_typical[usec]"},
	{name: "fetch_and_op_max_float64" + sendRTT + hostSuffix, metric: metricLatency, op: "fetch_and_op", kase: "fetch_and_op_max_float64", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2},
	{name: "put_1MiB" + hostSuffix, metric: metricBandwidth, op: "put", kase: "put_1MiB", size: 1 << 20, pt: ptWriteBW1M, column: "BW_average[MB/sec]"},
	{name: "get_1MiB" + hostSuffix, metric: metricBandwidth, op: "get", kase: "get_1MiB", size: 1 << 20, pt: ptReadBW1M, column: "BW_average[MB/sec]"},
}

// crossOrder is the order of the perftest tests across hosts, and of the
// cases compared with them.
var crossOrder = []ptest{ptFetchAdd, ptCmpSwap, ptReadLat, ptWriteLat, ptSendLat, ptWriteBW1M, ptReadBW1M}

// Time limits across hosts.
const (
	ptLimit      = 3 * time.Minute  // one perftest server or client
	ctlDial      = 2 * time.Minute  // rank 1 reaching rank 0's control address (the other host may boot later)
	ctlReply     = time.Minute      // rank 0 answering a command
	ctlIdle      = 10 * time.Minute // rank 0 waiting for rank 1's next command
	ptServerEnds = 15 * time.Second // a server ending after its client did
)

// ptLocal is what perftest uses on this host.
type ptLocal struct {
	dev             string
	port, gid, mtu  int
	perftestHostArg string // where the client finds the server (rank 1)
}

// perftestLocal finds this host's device, port and GID index as the group
// would (the flags and RMA_* variables, else the first device, port 1 and
// its RoCE v2 IPv4 GID), for perftest to use the same.
func perftestLocal(o group.Options, c *config) (ptLocal, error) {
	dev := o.Device
	if dev == "" {
		dev = os.Getenv("RMA_DEVICE")
	}
	vc, err := verbs.Open(dev)
	if err != nil {
		return ptLocal{}, err
	}
	defer vc.Close()
	l := ptLocal{dev: vc.Name(), port: o.Port, gid: o.GIDIndex, mtu: c.mtu}
	if l.port == 0 {
		l.port = 1
	}
	if !o.SetGIDIndex {
		table, err := vc.GIDTable(l.port)
		if err != nil {
			return ptLocal{}, err
		}
		if l.gid, err = verbs.DefaultGIDIndex(table); err != nil {
			return ptLocal{}, err
		}
	}
	return l, nil
}

// controlAddr is rank 0's control address: -control, else RMA_ADDR's host
// and the port after RMA_ADDR's.
func controlAddr(c *config, o group.Options) (string, error) {
	if c.control != "" {
		return c.control, nil
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return "", fmt.Errorf("RMA_ADDR %q: %w", o.Addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p >= 65535 {
		return "", fmt.Errorf("RMA_ADDR %q: no port after it for the control connection: use -control", o.Addr)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// crossCompare is -compare with one rank per host.
func crossCompare(ctx context.Context, o group.Options, c *config) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rmabench: rank %d: %v\n", o.Rank, err)
		return 1
	}
	if len(o.Secret) == 0 {
		return fail(errors.New("set RMA_SECRET to the same secret on both hosts"))
	}
	addr, err := controlAddr(c, o)
	if err != nil {
		return fail(err)
	}
	loc, err := perftestLocal(o, c)
	if err != nil {
		return fail(err)
	}
	if o.Rank == 0 {
		cc, err := acceptControl(ctx, addr, o.Secret)
		if err != nil {
			return fail(err)
		}
		defer cc.Close()
		fmt.Fprintf(os.Stderr, "rmabench: rank 0: perftest servers on %s port %d GID index %d\n", loc.dev, loc.port, loc.gid)
		return crossServe(ctx, o, c, cc, loc)
	}
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fail(fmt.Errorf("RMA_ADDR %q: %w", o.Addr, err))
	}
	loc.perftestHostArg = host
	if c.perftestHostSet {
		loc.perftestHostArg = c.perftestHost
	}
	cc, err := dialControl(ctx, addr, o.Secret)
	if err != nil {
		return fail(err)
	}
	defer cc.Close()
	if err := crossDrive(ctx, o, c, cc, loc); err != nil {
		return fail(err)
	}
	return 0
}

// crossServe is rank 0: it does what rank 1 asks on the control connection.
func crossServe(ctx context.Context, o group.Options, c *config, cc *control, loc ptLocal) int {
	var srv *ptServer
	defer func() {
		if srv != nil {
			srv.wait(0)
		}
	}()
	for {
		line, err := cc.recv(ctlIdle)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rmabench: rank 0: control connection: %v\n", err)
			return 1
		}
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "perftest":
			if srv != nil {
				srv.wait(0)
				srv = nil
			}
			id, n, _ := strings.Cut(arg, " ")
			pt, ok := ptestByID(id)
			iters, nerr := strconv.Atoi(n)
			if !ok || nerr != nil || iters < 1 || iters > 1e7 {
				err = cc.send("error " + strconv.Quote("no test "+arg))
				break
			}
			var serr error
			if srv, serr = startPerftestServer(ctx, pt, loc.dev, loc.port, loc.gid, loc.mtu, iters, ptLimit); serr != nil {
				srv = nil
				err = cc.send("error " + strconv.Quote(serr.Error()))
				break
			}
			err = cc.send("ready " + strconv.Itoa(srv.port))
		case "finish":
			if srv != nil {
				out, serr := srv.wait(ptServerEnds)
				if serr != nil {
					fmt.Fprintf(os.Stderr, "rmabench: rank 0: %s server: %v\n%s", srv.pt, serr, out)
				}
				srv = nil
			}
			err = cc.send("ok")
		case "join":
			if code := serve(ctx, o, c); code != 0 {
				return code
			}
		case "done":
			return 0
		default:
			fmt.Fprintf(os.Stderr, "rmabench: rank 0: unknown command %q on the control connection\n", line)
			return 1
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rmabench: rank 0: control connection: %v\n", err)
			return 1
		}
	}
}

// crossDrive is rank 1: every round, each perftest test with its server on
// rank 0's host, then the group and our cases; then the table.
func crossDrive(ctx context.Context, o group.Options, c *config, cc *control, loc ptLocal) error {
	fmt.Fprintf(os.Stderr, "rmabench: comparing across hosts with perftest on %s port %d GID index %d against %s; %d latency, %d bandwidth iterations; %d round(s)\n",
		loc.dev, loc.port, loc.gid, loc.perftestHostArg, c.iters, c.bwIters(1<<20), c.rounds)
	st := &steps{on: true, began: time.Now(), of: len(crossOrder)*c.rounds + 1}
	st.next(ptWarmup.String() + " (warm-up)")
	if _, err := remotePerftest(ctx, cc, ptWarmup, warmupIters, loc); err != nil {
		if ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "rmabench: warm-up: %v\n", firstLine(err))
	}
	all := append(append([]target{}, crossTargets...), crossExtras...)
	rounds := make([]round, c.rounds)
	for ri := range rounds {
		rd := &rounds[ri]
		*rd = newRound()
		for _, pt := range crossOrder {
			st.next(fmt.Sprintf("round %d: %s, then rmabench", ri+1, pt))
			var res ptResult
			var err error
			for try := 1; ; try++ {
				if res, err = remotePerftest(ctx, cc, pt, c.ptIters(pt), loc); err == nil || try == 3 || ctx.Err() != nil {
					break
				}
				fmt.Fprintf(os.Stderr, "rmabench: %v\nrmabench: running %s again\n", firstLine(err), pt)
			}
			if err != nil {
				return err
			}
			rd.pts[pt.String()] = res
			if err := cc.send("join"); err != nil {
				return err
			}
			if err := crossOurs(ctx, o, c, all, pt, rd); err != nil {
				return err
			}
		}
	}
	if err := cc.send("done"); err != nil {
		return err
	}
	rows := buildRows(all, len(crossTargets), rounds, 2)
	out := os.Stdout
	if c.jsonOut == "-" {
		out = os.Stderr
	}
	var note strings.Builder
	fmt.Fprintf(&note, " across hosts: latency: typical (median) of %d; bandwidth: %d operations of 1 MiB, %d in flight; MB = 2^20 bytes.\n",
		c.iters, c.bwIters(1<<20), c.inflight)
	if c.rounds > 1 {
		fmt.Fprintf(&note, " ours and perftest: medians of %d rounds, each perftest test followed at once by the cases compared with it (the group formed anew).\n", c.rounds)
	}
	fmt.Fprintf(&note, " took %.0f s.\n", time.Since(st.began).Seconds())
	fmt.Fprint(out, comparisonTable(rows)+note.String())
	if c.jsonOut != "" {
		if err := writeJSONFile(c.jsonOut, rows); err != nil {
			return err
		}
	}
	if n := failures(rounds); n > 0 {
		return fmt.Errorf("%d case(s) failed: see the rows' errors", n)
	}
	return nil
}

// crossOurs forms the group with rank 0, runs the cases of ts compared
// with pt that rd lacks, keeps their results in rd, and closes the group.
func crossOurs(ctx context.Context, o group.Options, c *config, ts []target, pt ptest, rd *round) error {
	g, err := join(ctx, o)
	if err != nil {
		return err
	}
	b, err := newBench(ctx, g, c)
	if err == nil {
		err = b.measure(ctx, ts, pt, c.ptIters(pt), rd)
		if cerr := b.close(ctx); err == nil {
			err = cerr
		}
	}
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	return err
}

// remotePerftest has rank 0 start the server of pt, runs its client here
// and returns the client's result row.
func remotePerftest(ctx context.Context, cc *control, pt ptest, iters int, loc ptLocal) (ptResult, error) {
	if err := cc.send(fmt.Sprintf("perftest %s %d", pt.id, iters)); err != nil {
		return nil, err
	}
	reply, err := cc.recv(ctlReply)
	if err != nil {
		return nil, err
	}
	port, err := readyPort(reply)
	if err != nil {
		return nil, fmt.Errorf("%s server on rank 0: %w", pt, err)
	}
	res, _, cerr := runPerftestClient(ctx, pt, loc.dev, loc.port, loc.gid, loc.mtu, iters, port, loc.perftestHostArg, ptLimit)
	if err := cc.send("finish"); err != nil {
		return nil, err
	}
	if reply, err = cc.recv(ctlReply + ptServerEnds); err != nil {
		return nil, err
	}
	if reply != "ok" {
		return nil, fmt.Errorf("rank 0 answered %q to finish", reply)
	}
	return res, cerr
}

// readyPort reads rank 0's answer to a perftest command: "ready PORT", or
// "error QUOTED-MESSAGE".
func readyPort(reply string) (int, error) {
	word, arg, _ := strings.Cut(reply, " ")
	switch word {
	case "ready":
		p, err := strconv.Atoi(arg)
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("bad port in %q", reply)
		}
		return p, nil
	case "error":
		if msg, err := strconv.Unquote(arg); err == nil {
			return 0, errors.New(msg)
		}
		return 0, errors.New(arg)
	}
	return 0, fmt.Errorf("unexpected answer %q", reply)
}

// control is the control connection between the two ranks: one line per
// message.
type control struct {
	conn net.Conn
	r    *bufio.Reader
}

// maxLine bounds a control message.
const maxLine = 64 << 10

func newControl(conn net.Conn) *control {
	return &control{conn: conn, r: bufio.NewReaderSize(conn, maxLine)}
}

func (cc *control) Close() error { return cc.conn.Close() }

func (cc *control) send(msg string) error {
	if strings.ContainsRune(msg, '\n') {
		return fmt.Errorf("control message %q has a line break", msg)
	}
	cc.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err := cc.conn.Write([]byte(msg + "\n"))
	return err
}

// recv reads a message, waiting at most limit.
func (cc *control) recv(limit time.Duration) (string, error) {
	cc.conn.SetReadDeadline(time.Now().Add(limit))
	line, err := cc.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errors.New("control message too long")
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(line), "\n"), nil
}

// The handshake: rank 0 sends ctlHello and a nonce; rank 1 answers with
// the MAC of that nonce under the secret and a nonce of its own; rank 0
// answers "ok" with the MAC of rank 1's nonce. Each side thus knows the
// other holds the secret.
const ctlHello = "rmabench-control/1"

// ctlMAC is the MAC that proves rank (0 or 1) knows secret, for nonce.
func ctlMAC(secret []byte, rank int, nonce string) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s rank %d %s", ctlHello, rank, nonce)
	return hex.EncodeToString(m.Sum(nil))
}

func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// acceptControl listens on addr's port until rank 1 connects with the
// secret (for at most ctlDial), and returns the connection.
func acceptControl(ctx context.Context, addr string, secret []byte) (*control, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", port))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	deadline := time.Now().Add(ctlDial)
	l.(*net.TCPListener).SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("control: no rank 1 on port %s: %w", port, err)
		}
		cc := newControl(conn)
		if err := cc.serverHandshake(secret, deadline); err != nil {
			fmt.Fprintf(os.Stderr, "rmabench: rank 0: control connection from %s refused: %v\n", conn.RemoteAddr(), err)
			conn.Close()
			continue
		}
		conn.SetDeadline(time.Time{})
		return cc, nil
	}
}

func (cc *control) serverHandshake(secret []byte, deadline time.Time) error {
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	if err := cc.send(ctlHello + " " + nonce); err != nil {
		return err
	}
	reply, err := cc.recv(min(10*time.Second, max(time.Until(deadline), time.Second)))
	if err != nil {
		return err
	}
	f := strings.Fields(reply)
	if len(f) != 3 || f[0] != "auth" || !hmac.Equal([]byte(f[1]), []byte(ctlMAC(secret, 1, nonce))) {
		return errors.New("wrong secret")
	}
	return cc.send("ok " + ctlMAC(secret, 0, f[2]))
}

// dialControl connects to rank 0's control address, retrying for at most
// ctlDial (rank 0's host may not be up yet), and authenticates.
func dialControl(ctx context.Context, addr string, secret []byte) (*control, error) {
	ctx, cancel := context.WithTimeout(ctx, ctlDial)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			cc := newControl(conn)
			if err = cc.clientHandshake(secret); err == nil {
				return cc, nil
			}
			conn.Close()
			return nil, fmt.Errorf("control connection to %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("control connection to %s: %w", addr, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (cc *control) clientHandshake(secret []byte) error {
	hello, err := cc.recv(10 * time.Second)
	if err != nil {
		return err
	}
	f := strings.Fields(hello)
	if len(f) != 2 || f[0] != ctlHello {
		return fmt.Errorf("not rmabench's control connection: %q", hello)
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	if err := cc.send("auth " + ctlMAC(secret, 1, f[1]) + " " + nonce); err != nil {
		return err
	}
	reply, err := cc.recv(10 * time.Second)
	if err != nil {
		return err
	}
	g := strings.Fields(reply)
	if len(g) != 2 || g[0] != "ok" || !hmac.Equal([]byte(g[1]), []byte(ctlMAC(secret, 0, nonce))) {
		return errors.New("rank 0 does not hold the secret (or refused ours)")
	}
	return nil
}
