//go:build !amd64

package main

func rdtsc() uint64 { return 0 }

const haveTSC = false
