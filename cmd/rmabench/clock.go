package main

import (
	"fmt"
	"time"
)

// A clock stamps each operation of a latency case. Reading the operating
// system's clock is not always cheap (about 1.5 us in the test VM, whose
// clock source is the emulated HPET): like perftest, rmabench reads the
// CPU's time-stamp counter where there is one, calibrated against the
// system clock at start.
type clock struct {
	tsc       bool
	nsPerTick float64
	base      time.Time
}

// newClock returns the clock of -clock: "tsc", "os" or "auto" (the TSC on
// amd64).
func newClock(kind string) (*clock, error) {
	switch kind {
	case "os":
		return &clock{base: time.Now()}, nil
	case "auto", "tsc":
		if !haveTSC {
			if kind == "tsc" {
				return nil, fmt.Errorf("no time-stamp counter on this architecture")
			}
			return &clock{base: time.Now()}, nil
		}
	default:
		return nil, fmt.Errorf("-clock must be auto, tsc or os, not %q", kind)
	}
	// Calibrate over 200 ms, as perftest's sample_get_cpu_mhz does over
	// its own interval.
	t0, c0 := time.Now(), rdtsc()
	time.Sleep(200 * time.Millisecond)
	t1, c1 := time.Now(), rdtsc()
	if c1 <= c0 {
		return &clock{base: time.Now()}, nil
	}
	return &clock{tsc: true, nsPerTick: float64(t1.Sub(t0).Nanoseconds()) / float64(c1-c0)}, nil
}

// stamp reads the clock, in ticks.
func (c *clock) stamp() uint64 {
	if c.tsc {
		return rdtsc()
	}
	return uint64(time.Since(c.base))
}

// duration converts a difference of stamps.
func (c *clock) duration(ticks uint64) time.Duration {
	if c.tsc {
		return time.Duration(float64(ticks) * c.nsPerTick)
	}
	return time.Duration(ticks)
}

func (c *clock) String() string {
	if c.tsc {
		return fmt.Sprintf("TSC at %.1f MHz", 1e3/c.nsPerTick)
	}
	return "the OS clock"
}
