package broadcast

import "testing"

// TestBroadcastWakesWhoFetchedBefore: a channel fetched before Broadcast
// is closed by it; one fetched after waits for the next.
func TestBroadcastWakesWhoFetchedBefore(t *testing.T) {
	var w Wake
	w.Broadcast() // nobody waits: nothing to close
	before := w.Wait()
	if w.Wait() != before {
		t.Fatal("two waiters before one broadcast got different channels")
	}
	w.Broadcast()
	select {
	case <-before:
	default:
		t.Fatal("the broadcast did not close the channel fetched before it")
	}
	after := w.Wait()
	select {
	case <-after:
		t.Fatal("a channel fetched after the broadcast is closed already")
	default:
	}
}
