package main

// rdtsc reads the time-stamp counter, as perftest's get_cycles does.
func rdtsc() uint64

const haveTSC = true
