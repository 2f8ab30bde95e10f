package fabric

import (
	"testing"
	"time"
)

// rtt is a Signaller that reports a fixed round-trip measurement.
type rtt struct {
	least, dev time.Duration
	ok         bool
}

func (rtt) Signal(int, []byte) error { return nil }

func (r rtt) RoundTrip(int) (time.Duration, time.Duration, bool) { return r.least, r.dev, r.ok }

// TestACKTimeout: the ACK timeout covers the measured round trip plus four
// deviations, at least about 17 ms (2^12 x 4.096 us), the deviations
// counting for no more than the peer timeout over the eight tries (or
// twice the round trip); without a measurement it is the peer timeout over
// the eight tries. Timeouts are 4.096 us x 2^t.
func TestACKTimeout(t *testing.T) {
	for _, c := range []struct {
		sig  Signaller
		want int // 4.096 us x 2^want
	}{
		{nil, 15}, // 1 s / 8 = 125 ms: 2^15 x 4.096 us = 134 ms
		{rtt{ok: false}, 15},
		{rtt{1600 * time.Microsecond, 2200 * time.Microsecond, true}, 12}, // 10.4 ms: the floor, 16.8 ms
		{rtt{2 * time.Millisecond, 10 * time.Millisecond, true}, 14},      // 42 ms: 67 ms (33.5 ms is short)
		{rtt{30 * time.Millisecond, 500 * time.Microsecond, true}, 13},    // 32 ms: 33.5 ms
		{rtt{time.Hour, time.Hour, true}, 31},                             // the field's most
		{rtt{2 * time.Millisecond, 250 * time.Millisecond, true}, 15},     // 1 s: the deviation capped, 125 ms
		{rtt{100 * time.Millisecond, time.Second, true}, 16},              // 4.1 s: twice the least, 200 ms: 268 ms
		{rtt{50 * time.Microsecond, 10 * time.Microsecond, true}, 12},     // a fast wire: the floor
	} {
		f := &Fabric{peerTimeout: time.Second}
		f.mgr.sig = c.sig
		if got := f.ackTimeout(1); got != c.want {
			t.Errorf("%+v: ACK timeout 2^%d x 4.096 us, want 2^%d", c.sig, got, c.want)
		}
	}
}
