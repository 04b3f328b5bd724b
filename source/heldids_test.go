package source

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/stage"
)

// TestHeldIDsModel: claims and releases of random ack ids (few distinct
// ones, so repeats are common) agree with a plain set: a claim succeeds
// exactly when the id is not held.
func TestHeldIDsModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := newHeldIDs()
		model := map[string]bool{}
		for range rapid.IntRange(1, 300).Draw(rt, "ops") {
			id := fmt.Sprintf("projects/p/subscriptions/s:%d", rapid.IntRange(0, 40).Draw(rt, "id"))
			if rapid.Bool().Draw(rt, "release") {
				h.release(id)
				delete(model, id)
				continue
			}
			if got, want := h.claim(id), !model[id]; got != want {
				rt.Fatalf("claim(%s) = %v, want %v", id, got, want)
			}
			model[id] = true
		}
		if h.len() != len(model) {
			rt.Fatalf("%d held, want %d", h.len(), len(model))
		}
	})
}

// TestAckIDHeldOnce: the same ack id in two responses, on two streams,
// while the first copy is held: the second copy is refused (never
// delivered, neither acked nor nacked) and counted in DuplicateAckIDs;
// the first is delivered and acked once, and Received counts it once.
// Once it is settled, a redelivery with the same ack id is accepted.
func TestAckIDHeldOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sends [3]chan *pubsubpb.StreamingPullResponse // per stream, 1 and 2
		for i := range sends {
			sends[i] = make(chan *pubsubpb.StreamingPullResponse)
		}
		f := &scripted{script: func(n int, ss pubsubpb.Subscriber_StreamingPullServer) error {
			for {
				select {
				case r := <-sends[n]:
					if err := ss.Send(r); err != nil {
						return err
					}
				case <-ss.Context().Done():
					return nil
				}
			}
		}}
		src, err := Subscribe(serveScripted(t, f), Config{Subscription: "projects/p/subscriptions/sub", Streams: 2})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		one := func(id string) *pubsubpb.StreamingPullResponse {
			return &pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
				{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: id, Data: []byte(id)}},
			}}
		}
		sends[1] <- one("first")
		m := <-out
		sends[2] <- one("copy") // same ack id, other stream, first copy held
		synctest.Wait()
		select {
		case c := <-out:
			t.Fatalf("the copy %q was delivered", c.ID)
		default:
		}
		m.Ack()
		wantAcks(t, f, []string{"a1"})
		if st := src.Stats(); st.Received != 1 || st.Acked != 1 || st.DuplicateAckIDs != 1 {
			t.Fatalf("stats %+v, want 1 received, 1 acked, 1 duplicate", st)
		}

		sends[1] <- one("again") // the first copy is settled: a redelivery
		if m := <-out; m.ID != "again" {
			t.Fatalf("delivered %q, want the redelivery", m.ID)
		} else {
			m.Ack()
		}
		wantAcks(t, f, []string{"a1", "a1"})
		g.Cancel()
		for range out {
		}
		_ = g.Wait()
		if err := src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := src.Stats(); st.Received != 2 || st.Acked != 2 || st.DuplicateAckIDs != 1 || st.Unsettled != 0 {
			t.Fatalf("stats %+v, want 2 received and acked, 1 duplicate, none unsettled", st)
		}
		if _, _, nacks := f.counts(); len(nacks) != 0 {
			t.Fatalf("nacked %v, want none", nacks)
		}
		if n := src.heldIDs.len(); n != 0 {
			t.Fatalf("%d ack ids still held after Close", n)
		}
	})
}

// wantAcks waits (a minute at most, in the bubble's time) until the server
// has the acks want, and fails on any other.
func wantAcks(t *testing.T, f *scripted, want []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, acks, _ := f.counts()
		if slices.Equal(acks, want) {
			return
		}
		if len(acks) > len(want) || time.Now().After(deadline) {
			t.Fatalf("server acks %v, want %v", acks, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// len counts the ids held.
func (h *heldIDs) len() int {
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		n += sh.ids.n
		sh.mu.Unlock()
	}
	return n
}
