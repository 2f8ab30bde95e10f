//go:build integration && !race

package test

// raceDetector: see race_on_test.go.
const raceDetector = false
