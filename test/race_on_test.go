//go:build integration && race

package test

// raceDetector: this binary is built with the race detector, which makes
// every rank several times slower; the heaviest cases shrink under it.
const raceDetector = true
