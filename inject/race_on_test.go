//go:build race

package inject

// raceEnabled: the race detector keeps shadow memory for every byte the program touches,
// so the process's peak RSS says nothing about what Pack itself holds.
const raceEnabled = true
