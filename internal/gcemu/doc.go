// Package gcemu starts Google's official Pub/Sub emulator (the Java server
// behind `gcloud beta emulators pubsub start`) for tests, so that our client
// is checked against the server our users develop against, not only against
// servers we wrote.
//
// Start is the one call a test needs: it finds the emulator, runs it on a
// free loopback port in its own process group, waits until it listens, and
// stops it when the test ends. Where the emulator is not installed the test
// is skipped with one line — except under CI=true, where a missing emulator
// fails the test, so CI cannot silently stop running the suite.
package gcemu
