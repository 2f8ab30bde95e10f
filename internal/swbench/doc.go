// Package swbench times the software of every path of the library, without
// a device: its tests and benchmarks, built with the tag standin, run on
// the stand-in NIC of package verbs, which carries out each work request
// while it is posted (or, with RMA_STANDIN_DELAY_NS, makes its completion
// visible that many nanoseconds later). What they time is what the library
// adds to the verbs.
//
// Two floors come from the same run: a loop in C that posts a fetch-and-add
// and polls for its completion, and the same loop in Go through package
// verbs. TestSoftware prints, for every path, the time and the process's
// CPU time per call, the allocations per call, and the ratio to the Go
// floor, and writes them to the JSON file RMA_BENCH_SW_JSON names:
//
//	go test -tags standin -run TestSoftware -v ./internal/swbench
//	make bench-sw   # the same, writing bench-sw.json
//
// Without the tag the package has nothing to run.
package swbench
