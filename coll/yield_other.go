//go:build !linux

package coll

import "runtime"

func osYield() { runtime.Gosched() }
