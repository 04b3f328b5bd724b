package source

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// revokingBudget grants every stream 10 messages and revokes the first
// stream's grant as soon as it is open.
type revokingBudget struct {
	mu     sync.Mutex
	opened []int64 // the grant of each Open of a new lane
	open   map[int]bool
}

func (b *revokingBudget) Receipt(message.Key) Receipt {
	return Receipt{Receive: func(int, []*Message) {}, Budget: b}
}

func (b *revokingBudget) Open(lane int, _, _ int64, revoke func()) (int64, int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open[lane] {
		b.open[lane] = true
		b.opened = append(b.opened, 10)
		if len(b.opened) == 1 {
			revoke()
		}
	}
	return 10, 0, true
}

func (b *revokingBudget) Closed(lane int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, lane)
}

func (b *revokingBudget) Room(int) bool         { return true }
func (b *revokingBudget) Wake() <-chan struct{} { return nil }

// TestRevokedStreamReopens: a stream whose Budget revoked its grant
// half-closes; a server that does not end it then (the stub keeps every
// stream open) has it cancelled revokeGrace later, and the stream opens
// again at once, with no backoff, and is not revoked again.
func TestRevokedStreamReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &capturingClient{answer: true}
		src, err := Subscribe(client, Config{Subscription: testSub, MaxOutstandingMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		b := &revokingBudget{open: map[int]bool{}}
		g := stage.NewGroup(context.Background())
		src.With(b).Run(g)
		time.Sleep(revokeGrace - time.Millisecond)
		synctest.Wait()
		if n := client.streamCount(); n != 1 {
			t.Fatalf("%d streams within revokeGrace of the revoke, want 1 (the server may still end it)", n)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n := client.streamCount(); n != 2 {
			t.Fatalf("%d streams just after revokeGrace, want 2: the revoked one cancelled and the next opened at once", n)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := client.streamCount(); n != 2 {
			t.Fatalf("%d streams a minute on, want 2", n)
		}
		g.Cancel()
		if err := g.Wait(); err != context.Canceled && err != nil {
			t.Fatal(err)
		}
	})
}

// streamCount is the number of streams opened so far.
func (c *capturingClient) streamCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}
