//go:build !race

package pack

// raceEnabled is true when the tests are built with -race (race_on_test.go).
const raceEnabled = false
