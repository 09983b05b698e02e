//go:build race

package pack

// raceEnabled: the race detector keeps shadow memory for every byte the program touches,
// so the process's peak RSS says nothing about what Write itself holds.
const raceEnabled = true
