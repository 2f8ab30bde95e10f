package fabric

import "testing"

func TestParseRunnable(t *testing.T) {
	for _, c := range []struct {
		line string
		want int
	}{
		{"0.79 1.14 1.37 1/81 19262\n", 1},
		{"12.00 8.50 4.25 17/1024 4242\n", 17},
		{"0.00 0.00 0.00 0/0 1", 0},
		{"0.79 1.14 1.37", -1},
		{"0.79 1.14 1.37 /81 1", -1},
		{"0.79 1.14 1.37 x/81 1", -1},
		{"0.79 1.14 1.37 81 1", -1},
		{"", -1},
		{"a b c 99999999999999999999/1 1", -1},
		{"  0.5\t0.4  0.3   3/9 7", 3},
	} {
		if got := parseRunnable([]byte(c.line)); got != c.want {
			t.Errorf("parseRunnable(%q) = %d, want %d", c.line, got, c.want)
		}
	}
	if n := runnable(); n < 1 {
		t.Errorf("runnable() = %d on this machine: this test's own thread is running", n)
	}
	if a := testing.AllocsPerRun(100, func() { runnable() }); a != 0 {
		t.Errorf("runnable allocates %v times per call, want 0 (it runs on the path of calls)", a)
	}
}
