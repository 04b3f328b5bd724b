package source

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestSettledOnlyReads: Settled on a message whose lease has lapsed
// reports false and changes nothing; an outcome set on it then becomes
// an expiry.
func TestSettledOnlyReads(t *testing.T) {
	rms := []*pubsubpb.ReceivedMessage{{AckId: "a", Message: &pubsubpb.PubsubMessage{MessageId: "1"}}}
	ms := decodeResponse(rms, "projects/p/subscriptions/s", nil, time.Now(), 20*time.Millisecond, nil, message.NewClock())
	m := ms[0]
	m.st.EndReceipt(m)
	deadline := time.Now().Add(10 * time.Second)
	for !m.st.Lapsed(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the 20 ms lease did not lapse in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if m.Settled() || m.Outcome() != Pending {
		t.Fatalf("lapsed message: Settled %v, outcome %v; want false, pending (Settled only reads)", m.Settled(), m.Outcome())
	}
	if m.Ack() || m.Outcome() != Expired || !m.Settled() {
		t.Fatalf("ack of a lapsed copy: outcome %v, settled %v; want expired", m.Outcome(), m.Settled())
	}
}

// TestExpiredWhileWaitingIsNotHandedOn: a message waits in the hand-off
// (downstream takes nothing) with a lapse far ahead, and is expired
// meanwhile, as the Extender does when an extension brought its deadline
// forward. Downstream then finds nothing to take: the hand-off dropped
// the settled copy rather than handing it on, one message at a time (Run)
// and in batches (RunBatches).
func TestExpiredWhileWaitingIsNotHandedOn(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprintf("batches=%v", batches), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &scripted{script: func(_ int, ss pubsubpb.Subscriber_StreamingPullServer) error {
					if err := ss.Send(&pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
						{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: "1", Data: []byte("x")}},
					}}); err != nil {
						return err
					}
					return holdOpen(ss)
				}}
				src, err := Subscribe(serveScripted(t, f), Config{Subscription: "projects/p/subscriptions/sub", Streams: 1, StreamAckDeadline: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				g := stage.NewGroup(context.Background())
				var take func() bool // a non-blocking receive: whether one was handed on
				if batches {
					out := src.RunBatches(g)
					take = func() bool {
						select {
						case b := <-out:
							return len(b) > 0
						default:
							return false
						}
					}
				} else {
					out := src.Run(g)
					take = func() bool {
						select {
						case <-out:
							return true
						default:
							return false
						}
					}
				}
				synctest.Wait() // received, waiting in the hand-off
				n := 0
				src.held.each(func(m *Message) {
					m.st.Settle(m, message.Expired, 0)
					n++
				})
				synctest.Wait()
				if n != 1 || take() {
					t.Fatalf("%d messages expired; handed on after its expiry: %v", n, n == 1)
				}
				g.Cancel()
				_ = g.Wait()
				if err := src.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
