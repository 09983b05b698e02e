//go:build !race

package inject

// raceEnabled is true when the tests are built with -race (race_on_test.go).
const raceEnabled = false
