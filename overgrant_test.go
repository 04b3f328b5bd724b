package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// floodServer ignores flow control: its one stream sends every response
// it has at once, whatever the initial request granted, and it counts
// the acks.
type floodServer struct {
	fakeServer
	responses, per, size int
	acked                atomic.Int64
}

func (f *floodServer) StreamingPull(s pubsubpb.Subscriber_StreamingPullServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	data := make([]byte, f.size)
	for r := range f.responses {
		resp := &pubsubpb.StreamingPullResponse{}
		for i := range f.per {
			id := fmt.Sprint(r*f.per + i)
			resp.ReceivedMessages = append(resp.ReceivedMessages, &pubsubpb.ReceivedMessage{
				AckId: "ack-" + id, Message: &pubsubpb.PubsubMessage{MessageId: id, Data: data},
			})
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func (f *floodServer) Acknowledge(ctx context.Context, in *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	f.acked.Add(int64(len(in.AckIds)))
	return &emptypb.Empty{}, nil
}

// TestBudgetsBoundWhatAServerFloods: a server that ignores both grants
// floods one stream. With either budget spent the stream stops reading,
// so what the subscriber holds stays within the budget plus one response
// at every moment; what came past the grant is counted in OverGrant and
// warned once for the stream; every message is handled and acked.
func TestBudgetsBoundWhatAServerFloods(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		msgs, bytes          int64
		responses, per, size int
		work                 time.Duration // per message: keeps the subscriber behind the flood
		// free is how many messages are handled before the rest wait for
		// the third response to be read, so it is read past the grant
		// whatever the machine's load: with 1 MiB granted, the third
		// 400 KiB response is read at once; with 100 messages granted,
		// once one of them is settled.
		free int64
	}{
		// 20 responses of 4 × 100 KiB: 8 MiB against a 1 MiB budget.
		{"bytes", Unlimited, 1 << 20, 20, 4, 100 << 10, 20 * time.Millisecond, 0},
		// 10 responses of 50 against a budget of 100 messages.
		{"messages", 100, Unlimited, 10, 50, 10, 2 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &floodServer{responses: tc.responses, per: tc.per, size: tc.size}
			logs := &syncBuffer{}
			s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{
				Conn: serveFake(t, f), Streams: 1, MaxOutstandingMessages: tc.msgs, MaxOutstandingBytes: tc.bytes,
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			maxMsgs, maxBytes := int64(tc.per), int64(tc.per*tc.size) // one response
			if tc.msgs > 0 {
				maxMsgs += tc.msgs
			} else {
				maxMsgs = int64(tc.responses * tc.per)
			}
			if tc.bytes > 0 {
				maxBytes += tc.bytes
			} else {
				maxBytes = int64(tc.responses * tc.per * tc.size)
			}
			var peakMsgs, peakBytes atomic.Int64
			sample := func() {
				st := s.Stats()
				for peak, v := range map[*atomic.Int64]int64{&peakMsgs: st.Outstanding, &peakBytes: st.OutstandingBytes} {
					for old := peak.Load(); v > old && !peak.CompareAndSwap(old, v); old = peak.Load() {
					}
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var handled atomic.Int64
			done := runAsync(ctx, s, 4, func(context.Context, *Message) error {
				sample()
				if handled.Add(1) > tc.free {
					for deadline := time.Now().Add(10 * time.Second); s.Stats().Received < uint64(3*tc.per); time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							return errors.New("the third response was not read within 10 s")
						}
					}
				}
				time.Sleep(tc.work)
				return nil
			})
			total := int64(tc.responses * tc.per)
			waitFor(t, "every message acked", 60*time.Second, func() bool {
				sample()
				return f.acked.Load() == total
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if peakMsgs.Load() > maxMsgs || peakBytes.Load() > maxBytes {
				t.Fatalf("held up to %d messages, %d bytes; the budget plus one response is %d messages, %d bytes",
					peakMsgs.Load(), peakBytes.Load(), maxMsgs, maxBytes)
			}
			st := s.Stats()
			if st.OverGrant == 0 || st.Received != uint64(total) || st.Acked != uint64(total) {
				t.Fatalf("stats %+v: want OverGrant > 0, %d received and acked", st, total)
			}
			if n := strings.Count(logs.String(), "more than its flow-control grant"); n != 1 {
				t.Fatalf("%d over-grant warnings, want 1 (one stream):\n%s", n, logs.String())
			}
		})
	}
}
