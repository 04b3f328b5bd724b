//go:build !race

package suite

// raceDetector reports whether the test binary runs with -race.
const raceDetector = false
