package sink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// stubClient records the ack ids of Acknowledge and ModifyAckDeadline
// calls as "ack:<id>" and "modack<seconds>:<id>".
type stubClient struct {
	pubsubpb.SubscriberClient
	mu   sync.Mutex
	sent []string
}

func (s *stubClient) Acknowledge(_ context.Context, req *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range req.AckIds {
		s.sent = append(s.sent, "ack:"+id)
	}
	return &emptypb.Empty{}, nil
}

func (s *stubClient) ModifyAckDeadline(_ context.Context, req *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range req.AckIds {
		s.sent = append(s.sent, fmt.Sprintf("modack%d:%s", req.AckDeadlineSeconds, id))
	}
	return &emptypb.Empty{}, nil
}

func (s *stubClient) all() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, x := range s.sent {
		out[x] = true
	}
	return out
}

// fakeLeases records releases.
type fakeLeases struct {
	mu       sync.Mutex
	released map[string]message.Outcome
}

func (l *fakeLeases) Release(m *message.Message, o message.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.released[m.AckID]; dup {
		panic("lease released twice: " + m.AckID)
	}
	l.released[m.AckID] = o
}

func newMsg(id string, size int) *message.Message {
	m := &message.Message{ID: id, AckID: id}
	message.SetSize(m, size)
	return m
}

// TestSettlerSettlesOnce: every outcome releases the permit and the lease
// once and sends what it means; a second outcome does nothing.
func TestSettlerSettlesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		acks, err := ack.New(c, "projects/p/subscriptions/s", ack.Config{})
		if err != nil {
			t.Fatal(err)
		}
		fc := flow.NewFlowControl(10, 0)
		leases := &fakeLeases{released: map[string]message.Outcome{}}
		s := NewSettler(acks, fc, leases)

		outcomes := map[string]func(m *message.Message) bool{
			"a": (*message.Message).Ack,
			"n": (*message.Message).Nack,
			"d": func(m *message.Message) bool { return m.NackAfter(1500 * time.Millisecond) },
			"o": (*message.Message).NoOp,
			"e": func(m *message.Message) bool { return message.Settle(m, message.Expired, 0) },
		}
		for id, settle := range outcomes {
			m := newMsg(id, 100)
			message.Bind(m, s)
			if !fc.AcquireMessage(m) {
				t.Fatal("acquire")
			}
			if !settle(m) {
				t.Fatalf("%s: first outcome refused", id)
			}
			if m.Ack() || m.Nack() {
				t.Fatalf("%s: a second outcome was taken", id)
			}
			if m.Result() != nil {
				t.Fatalf("%s: a Result for a message that is not exactly-once", id)
			}
		}
		if err := acks.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 5 || st.Released != 5 {
			t.Fatalf("flow: %+v", st)
		}
		want := map[string]bool{"ack:a": true, "modack0:n": true, "modack2:d": true}
		if got := c.all(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		wantLeases := map[string]message.Outcome{"a": message.Ack, "n": message.Nack, "d": message.NackAfter, "o": message.NoOp, "e": message.Expired}
		if fmt.Sprint(leases.released) != fmt.Sprint(wantLeases) {
			t.Fatalf("leases %v, want %v", leases.released, wantLeases)
		}
	})
}

// TestSettlerExactlyOnceResult: an exactly-once message has its Result as
// soon as Ack returns, settled when the server confirmed.
func TestSettlerExactlyOnceResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		acks, err := ack.New(c, "projects/p/subscriptions/s", ack.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s := NewSettler(acks, nil, nil)
		m := newMsg("x", 1)
		m.ExactlyOnce = true
		message.Bind(m, s)
		m.Ack()
		r := m.Result()
		if r == nil {
			t.Fatal("no Result after Ack returned")
		}
		if err := r.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := acks.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSettlerWithoutAcknowledger(t *testing.T) {
	fc := flow.NewFlowControl(1, 0)
	m := newMsg("x", 1)
	message.Bind(m, NewSettler(nil, fc, nil))
	fc.AcquireMessage(m)
	m.Ack()
	if fc.Outstanding() != 0 {
		t.Fatal("permit not released")
	}
}
