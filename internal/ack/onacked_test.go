package ack

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// TestOnAckedOncePerAckID: every queued ack id reaches OnAcked exactly
// once — after transient failures were retried, and when Close abandons
// what it cannot send — and nacks never do.
func TestOnAckedOncePerAckID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client, sub := newServer(t, pubsubtest.SubscriptionConfig{Name: "sub"})
		var mu sync.Mutex
		seen := map[string]int{}
		a, err := New(client, sub, Config{OnAcked: func(ids []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				seen[id]++
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		srv.FailNext("Acknowledge", 2, codes.Unavailable)
		for i := range 2500 {
			a.Ack(fmt.Sprint("a", i))
		}
		a.Nack("n1", 0)
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		a.Ack("after-close") // abandoned at once
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2501 || seen["n1"] != 0 || seen["after-close"] != 1 {
			t.Fatalf("OnAcked saw %d ids (nack %d, after-close %d)", len(seen), seen["n1"], seen["after-close"])
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("%s reported %d times", id, n)
			}
		}
	})
}
