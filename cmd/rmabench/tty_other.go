//go:build !linux

package main

func isatty(fd int) bool { return false }
