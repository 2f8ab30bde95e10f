package main

import (
	"net"
	"testing"
	"time"
)

func TestParseWire(t *testing.T) {
	for _, c := range []struct {
		spec string
		want wireFaults
		seed uint64
		bad  bool
	}{
		{spec: "", want: wireFaults{}},
		{spec: "none", want: wireFaults{}},
		{spec: "loss=2%,dup=1%,reorder=0.02,seed=7", want: wireFaults{loss: 0.02, dup: 0.01, reorder: 0.02}, seed: 7},
		{spec: "delay=1ms, jitter=20ms", want: wireFaults{delay: time.Millisecond, jitter: 20 * time.Millisecond}},
		{spec: "loss=101%", bad: true},
		{spec: "loss=-1", bad: true},
		{spec: "jitter=-1ms", bad: true},
		{spec: "lossy", bad: true},
		{spec: "mtu=9000", bad: true},
		{spec: "loss=5%,cut=tcp", want: wireFaults{loss: 0.05, cutTCP: true}},
		{spec: "cut=udp", bad: true},
	} {
		f, seed, err := parseWire(c.spec)
		if c.bad {
			if err == nil {
				t.Errorf("parseWire(%q) = %v, want an error", c.spec, f)
			}
			continue
		}
		if err != nil || f != c.want || seed != c.seed {
			t.Errorf("parseWire(%q) = %v, seed %d, %v; want %v, seed %d", c.spec, f, seed, err, c.want, c.seed)
		}
	}
}

// TestWireFate: the faults are drawn at the rates asked, and the same seed draws the same
// fates.
func TestWireFate(t *testing.T) {
	f := wireFaults{loss: 0.05, dup: 0.1, reorder: 0.2, jitter: 3 * time.Millisecond}
	draw := func(seed uint64) (lost, dup, reord int, seq []int) {
		w := &wire{faults: f}
		w2, _ := newWire(f, seed, [2]int{1, 2})
		w.rng = w2.rng
		w2.close()
		for range 20000 {
			copies := w.fate()
			seq = append(seq, len(copies))
			switch {
			case len(copies) == 0:
				lost++
			case len(copies) == 2:
				dup++
			}
			held := false
			for _, c := range copies {
				held = held || c.held
				if c.wait < 0 || c.wait > f.jitter+max(reorderGap, f.jitter) {
					t.Fatalf("a wait of %v with jitter %v", c.wait, f.jitter)
				}
			}
			if held {
				reord++
			}
		}
		return lost, dup, reord, seq
	}
	lost, dup, reord, seq := draw(1)
	near := func(what string, got int, p float64) {
		want := p * 20000
		if float64(got) < 0.8*want || float64(got) > 1.2*want {
			t.Errorf("%s: %d of 20000, want about %.0f", what, got, want)
		}
	}
	near("lost", lost, 0.05)
	near("duplicated", dup, 0.95*0.1)
	near("reordered", reord, 0.95*(0.2+0.1*0.2)) // a duplicate's copies draw apart
	_, _, _, again := draw(1)
	for i := range seq {
		if seq[i] != again[i] {
			t.Fatalf("seed 1 drew differently at frame %d", i)
		}
	}
}

// wireHosts opens two UDP sockets on the loopback that stand for the guests' netdevs, and
// returns them with their ports.
func wireHosts(t *testing.T) (hosts [2]*net.UDPConn, ports [2]int) {
	for i := range hosts {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadBuffer(4 << 20)
		hosts[i], ports[i] = c, c.LocalAddr().(*net.UDPAddr).Port
	}
	return hosts, ports
}

// TestWireRelay: frames sent to the relay reach the other side, less those lost, plus the
// duplicates, and the counts say so.
func TestWireRelay(t *testing.T) {
	hosts, ports := wireHosts(t)
	w, err := newWire(wireFaults{loss: 0.1, dup: 0.1}, 3, ports)
	if err != nil {
		t.Fatal(err)
	}
	w.start()
	relay := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: w.Ports()[0]}
	const n = 500
	for i := range n {
		if _, err := hosts[0].WriteToUDP([]byte{byte(i), byte(i >> 8)}, relay); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let the relay keep up
		}
	}
	got := 0
	buf := make([]byte, 64)
	hosts[1].SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		if _, _, err := hosts[1].ReadFromUDP(buf); err != nil {
			break
		}
		got++
	}
	w.close()
	want := int(w.counts.frames.Load() - w.counts.dropped.Load() + w.counts.duplicated.Load())
	t.Logf("sent %d, received %d: %v", n, got, &w.counts)
	if w.counts.frames.Load() != n || got != want {
		t.Errorf("relay: %v; received %d, want %d", &w.counts, got, want)
	}
	if d := w.counts.dropped.Load(); d < n/20 || d > n/5 {
		t.Errorf("%d of %d dropped at 10%%", d, n)
	}
}

// TestWireCutTCP: with cut=tcp, frames carrying TCP (over IPv4 or IPv6) are dropped and
// the others relayed.
func TestWireCutTCP(t *testing.T) {
	hosts, ports := wireHosts(t)
	w, err := newWire(wireFaults{cutTCP: true}, 5, ports)
	if err != nil {
		t.Fatal(err)
	}
	w.start()
	relay := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: w.Ports()[0]}
	frame := func(ethertype uint16, proto byte) []byte {
		f := make([]byte, 60)
		f[12], f[13] = byte(ethertype>>8), byte(ethertype)
		if ethertype == 0x0800 {
			f[14+9] = proto
		} else {
			f[14+6] = proto
		}
		return f
	}
	frames := []struct {
		b    []byte
		pass bool
	}{
		{frame(0x0800, 6), false}, // TCP over IPv4
		{frame(0x0800, 17), true}, // UDP over IPv4: RoCE v2
		{frame(0x86dd, 6), false}, // TCP over IPv6
		{frame(0x86dd, 17), true}, // UDP over IPv6
		{frame(0x0806, 6), true},  // ARP
		{[]byte{1, 2, 3}, true},   // too short to tell
	}
	want := 0
	for i, f := range frames {
		f.b = append(f.b, byte(i))
		if _, err := hosts[0].WriteToUDP(f.b, relay); err != nil {
			t.Fatal(err)
		}
		if f.pass {
			want++
		}
	}
	var got []byte
	buf := make([]byte, 128)
	hosts[1].SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		n, _, err := hosts[1].ReadFromUDP(buf)
		if err != nil {
			break
		}
		got = append(got, buf[n-1])
	}
	w.close()
	if len(got) != want || w.counts.cut.Load() != uint64(len(frames)-want) {
		t.Errorf("frames received (by index): %v, want those of %d passing; relay: %v", got, want, &w.counts)
	}
	for _, i := range got {
		if !frames[i].pass {
			t.Errorf("frame %d (%x) was relayed, want it cut", i, frames[i].b[:24])
		}
	}
}

// TestWireJitterKeepsOrder: with jitter (and no reordering) the frames arrive in the order
// they were sent, later than they would without it.
func TestWireJitterKeepsOrder(t *testing.T) {
	hosts, ports := wireHosts(t)
	w, err := newWire(wireFaults{jitter: 5 * time.Millisecond, delay: 5 * time.Millisecond}, 4, ports)
	if err != nil {
		t.Fatal(err)
	}
	w.start()
	defer w.close()
	relay := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: w.Ports()[0]}
	const n = 300
	start := time.Now()
	for i := range n {
		if _, err := hosts[0].WriteToUDP([]byte{byte(i), byte(i >> 8)}, relay); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	buf := make([]byte, 64)
	hosts[1].SetReadDeadline(time.Now().Add(2 * time.Second))
	for i := range n {
		k, _, err := hosts[1].ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i, n, err)
		}
		if got := int(buf[0]) | int(buf[1])<<8; k != 2 || got != i {
			t.Fatalf("frame %d arrived as number %d: out of order", i, got)
		}
	}
	if d := time.Since(start); d < 5*time.Millisecond {
		t.Errorf("%d frames through 5 ms ± 5 ms in %v: not delayed", n, d)
	}
}
