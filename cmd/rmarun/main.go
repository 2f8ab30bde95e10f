// Command rmarun starts N ranks of a program on this host, as a group.
//
//	rmarun -n 4 ./prog args...
//
// Each rank gets RMA_RANK, RMA_SIZE, RMA_ADDR (a free loopback port for
// rank 0) and RMA_SECRET (fresh random bytes) in its environment, which
// group.FromEnv reads. Every output line is prefixed with its rank. When a
// rank fails, the others are stopped, and rmarun exits with the first
// failing rank's exit code (0 if all succeed). Under mpirun or srun no
// launcher is needed: group.FromEnv reads the rank and size they set, and
// RMA_ADDR and RMA_SECRET must be exported to every rank.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 2, "number of ranks")
	addr := flag.String("addr", "", "host:port for rank 0 to listen on (default: a free loopback port)")
	timeout := flag.Duration("timeout", 0, "stop every rank after this long (0: no limit)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: rmarun [-n N] [-addr host:port] [-timeout d] program [args...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*n, *addr, *timeout, flag.Args()))
}

func run(n int, addr string, timeout time.Duration, argv []string) int {
	if addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "rmarun:", err)
			return 1
		}
		addr = l.Addr().String()
		l.Close()
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		fmt.Fprintln(os.Stderr, "rmarun:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var outMu sync.Mutex
	var wg sync.WaitGroup
	codes := make([]int, n)
	first := -1
	var firstMu sync.Mutex
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Env = append(os.Environ(),
			"RMA_RANK="+strconv.Itoa(r), "RMA_SIZE="+strconv.Itoa(n),
			"RMA_ADDR="+addr, "RMA_SECRET="+hex.EncodeToString(key))
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "rmarun: rank %d: %v\n", r, err)
			cancel()
			codes[r] = 127
			firstMu.Lock()
			if first < 0 {
				first = r
			}
			firstMu.Unlock()
			break
		}
		var pipes sync.WaitGroup
		for _, p := range []struct {
			r io.Reader
			w io.Writer
		}{{stdout, os.Stdout}, {stderr, os.Stderr}} {
			pipes.Add(1)
			go func() {
				defer pipes.Done()
				sc := bufio.NewScanner(p.r)
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				for sc.Scan() {
					outMu.Lock()
					fmt.Fprintf(p.w, "[%d] %s\n", r, sc.Bytes())
					outMu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipes.Wait()
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				code = ee.ExitCode()
				if code < 0 {
					code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
				}
			case err != nil:
				code = 1
			}
			codes[r] = code
			if code != 0 {
				firstMu.Lock()
				if first < 0 {
					first = r
					outMu.Lock()
					fmt.Fprintf(os.Stderr, "rmarun: rank %d exited with code %d; stopping the others\n", r, code)
					outMu.Unlock()
				}
				firstMu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if first >= 0 {
		return codes[first]
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "rmarun: stopped:", context.Cause(ctx))
		return 1
	}
	return 0
}
