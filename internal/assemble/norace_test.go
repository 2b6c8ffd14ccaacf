//go:build !race

package assemble_test

// raceOn is whether the race detector is on: its tests do less.
const raceOn = false
