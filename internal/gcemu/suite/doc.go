// Package suite holds the integration tests that run pubsubflow against
// Google's official Pub/Sub emulator — the server users develop against
// with `gcloud beta emulators pubsub start`. It has no code of its own: the
// tests start one emulator for the package (internal/gcemu), make topics and
// subscriptions with Google's Go client, and check our Subscriber, Publisher
// and CLI-level behaviour on that server next to Google's client.
//
// Run it alone with
//
//	go test -race -count=1 ./internal/gcemu/suite
//
// (add -short to leave out the 75 s idle-stream test). Without the emulator
// the tests skip with one line, except under CI=true, where they fail.
package suite
