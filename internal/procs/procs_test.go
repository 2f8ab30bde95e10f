package procs

import (
	"os"
	"runtime"
	"testing"
)

func TestRaise(t *testing.T) {
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok {
		os.Unsetenv("GOMAXPROCS")
		defer os.Setenv("GOMAXPROCS", v)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		env        string // "" : unset
		have, want int
	}{
		{"", 1, 2}, // the runtime's default on one CPU: raised
		{"", 2, 2},
		{"", 8, 8},
		{"1", 1, 1}, // chosen by the user: kept
	} {
		if c.env != "" {
			os.Setenv("GOMAXPROCS", c.env)
		} else {
			os.Unsetenv("GOMAXPROCS")
		}
		runtime.GOMAXPROCS(c.have)
		raise()
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("GOMAXPROCS=%q, %d Ps: raise left %d, want %d", c.env, c.have, got, c.want)
		}
	}
	os.Unsetenv("GOMAXPROCS")
}
