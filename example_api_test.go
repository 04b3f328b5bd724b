package pubsubflow_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// closeWhenAcked closes sub once it has acked n messages, a stand-in for
// a program that runs until it is told to stop, and returns Close's result.
func closeWhenAcked(sub *pubsubflow.Subscriber, n uint64) <-chan error {
	closed := make(chan error, 1)
	go func() {
		for sub.Stats().Acked < n {
			time.Sleep(5 * time.Millisecond)
		}
		closed <- sub.Close()
	}()
	return closed
}

// A subscription name is checked by the service's rules before anything
// is dialed.
func ExampleNewSubscriber() {
	_, err := pubsubflow.NewSubscriber(context.Background(), "projects/p/subscriptions/a b", pubsubflow.SubscriberConfig{})
	fmt.Println(err != nil)
	fmt.Println(pubsubflow.ValidateSubscription("projects/my-project/subscriptions/orders"))
	// Output:
	// true
	// <nil>
}

// Validate names every bad field at once.
func ExampleSubscriberConfig_Validate() {
	cfg := pubsubflow.SubscriberConfig{
		StreamAckDeadline: 5 * time.Second,
		Lease:             flow.Fixed(time.Minute, 30*time.Second),
	}
	for _, line := range strings.Split(cfg.Validate().Error(), "\n") {
		fmt.Println(line)
	}
	// Output:
	// pubsubflow: SubscriberConfig: pubsubflow/source: StreamAckDeadline 5s must be 0 (60 s) or within 10s–10m0s
	// pubsubflow: SubscriberConfig (Lease, MaxExtension): flow: Fixed interval 1m0s must be shorter than the deadline 30s
}

// Process is Run's processing stage, for a pipeline of your own; this one
// is the chain Run builds, Source → Process → Acknowledge, and other
// stages may sit between them.
func ExampleSubscriber_Process() {
	srv, subscription := embedded(50)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	handle := sub.Process(4, func(ctx context.Context, m *pubsubflow.Message) error {
		return nil // nil: OnSuccess (ack); an error: OnFailure (nack)
	})
	closed := closeWhenAcked(sub, 50)
	err = pipeline.From(sub.Source()).Via(handle).To(sub.Acknowledge())
	fmt.Println("pipeline:", err, "close:", <-closed)
	st := sub.Stats()
	fmt.Println("received:", st.Received, "acked:", st.Acked, "outstanding:", st.Outstanding)
	// Output:
	// pipeline: <nil> close: <nil>
	// received: 50 acked: 50 outstanding: 0
}

// Shutdown with a deadline: nothing new arrives, messages in processing
// get until the deadline to settle, the rest are nacked.
func ExampleSubscriber_Shutdown() {
	srv, subscription := embedded(10)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(context.Background(), 2, func(ctx context.Context, m *pubsubflow.Message) error { return nil })
	}()
	for sub.Stats().Acked < 10 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("shutdown:", sub.Shutdown(ctx), "run:", <-done)
	// Output: shutdown: <nil> run: <nil>
}

// ClientID is sent on every stream, reconnects included.
func ExampleSubscriber_ClientID() {
	srv, subscription := embedded(0)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn(), ClientID: "worker-7"})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	fmt.Println(sub.ClientID())
	// Output: worker-7
}

// Streams embeds go-streams operators between a subscriber's stages. A
// message a go-streams Filter drops never comes out of the sub-graph:
// Hold after it went in it is settled with Lost — here Ack, the graph
// does not want it — and counted.
func ExampleStreams() {
	srv, subscription := embedded(20)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	even := pubsubflow.Streams(func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewFilter(func(m *pubsubflow.Message) bool {
			var n int
			fmt.Sscanf(string(m.Data), "order %d", &n)
			return n%2 == 0
		}, 1))
	}, pubsubflow.StreamsOptions{Hold: 100 * time.Millisecond, Lost: pubsubflow.Ack})
	closed := closeWhenAcked(sub, 20)
	err = pipeline.From(sub.Source()).Via(even).To(sub.Acknowledge())
	st := sub.Stats()
	fmt.Println("pipeline:", err, "close:", <-closed, "acked:", st.Acked, "dropped by the graph:", st.StreamsLost)
	// Output: pipeline: <nil> close: <nil> acked: 20 dropped by the graph: 10
}

// Filter settles what it drops at once, with the outcome it is given:
// Ack, processed and not wanted.
func ExampleFilter() {
	srv, subscription := embedded(20)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	var kept atomic.Int64
	even := pubsubflow.Filter(func(m *pubsubflow.Message) bool {
		var n int
		fmt.Sscanf(string(m.Data), "order %d", &n)
		return n%2 == 0
	}, pubsubflow.Ack)
	count := pipeline.Filter(func(*pubsubflow.Message) bool { kept.Add(1); return true }, func(*pubsubflow.Message) {})
	closed := closeWhenAcked(sub, 20)
	err = pipeline.From(sub.Source()).Via(even, count).To(sub.Acknowledge())
	fmt.Println("pipeline:", err, "close:", <-closed, "kept:", kept.Load(), "acked:", sub.Stats().Acked)
	// Output: pipeline: <nil> close: <nil> kept: 10 acked: 20
}

// Stats is a cheap snapshot: what was received and settled, and what the
// subscriber holds right now (Outstanding = Buffered + Processing).
func ExampleSubscriber_Stats() {
	srv, subscription := embedded(5)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	closed := closeWhenAcked(sub, 5)
	err = sub.Run(context.Background(), 1, func(context.Context, *pubsubflow.Message) error { return nil })
	<-closed
	st := sub.Stats()
	fmt.Println(err, st.Received, st.Acked, st.Outstanding, st.Buffered, st.Processing)
	// Output: <nil> 5 5 0 0 0
}

// Close drains: nothing new arrives, what is in processing settles, the
// acks are flushed. A second Close returns the first one's result.
func ExampleSubscriber_Close() {
	srv, subscription := embedded(0)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	fmt.Println(sub.Close(), sub.Close())
	// Output: <nil> <nil>
}

// Acknowledge is the sink paired with Source: a message that reaches it
// without an outcome gets OnSuccess (ack); one a stage already settled is
// left alone.
func ExampleSubscriber_Acknowledge() {
	srv, subscription := embedded(4)
	defer srv.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn(), OnShutdown: pubsubflow.NoOp})
	if err != nil {
		panic(err)
	}
	nackedOnce := map[string]bool{} // Filter runs on one goroutine
	nackOdd := pipeline.Filter(func(m *pubsubflow.Message) bool {
		var n int
		fmt.Sscanf(string(m.Data), "order %d", &n)
		if n%2 == 1 && !nackedOnce[m.ID] {
			nackedOnce[m.ID] = true
			m.Nack() // settled here: Acknowledge leaves it alone
		}
		return true
	}, func(*pubsubflow.Message) {}) // keep drops nothing
	closed := closeWhenAcked(sub, 4) // the nacked ones come back and are acked
	err = pipeline.From(sub.Source()).Via(nackOdd).To(sub.Acknowledge())
	st := sub.Stats()
	fmt.Println(err, <-closed, st.Acked, st.Nacked)
	// Output: <nil> <nil> 4 2
}

// ValidateSubscription applies the service's name rules, as the CLI does.
func ExampleValidateSubscription() {
	fmt.Println(pubsubflow.ValidateSubscription("projects/my-project/subscriptions/orders"))
	fmt.Println(pubsubflow.ValidateSubscription("projects/my-project/subscriptions/goog-orders") != nil)
	// Output:
	// <nil>
	// true
}
