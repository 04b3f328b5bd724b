package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// server starts a pubsubtest server with topic "orders".
func server() (*pubsubtest.Server, string) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	topic, err := srv.CreateTopic(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}
	return srv, topic
}

func ExampleNew() {
	srv, topic := server()
	defer srv.Close()

	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	id, err := p.Publish(context.Background(), &publisher.Message{Data: []byte("hello")}).Get(context.Background())
	fmt.Println(id, err)
	// Output: 1 <nil>
}

// countingClient is a PublisherClient that counts the messages of each
// Publish request before passing it on.
type countingClient struct {
	pubsubpb.PublisherClient
	sizes []int
}

func (c *countingClient) Publish(ctx context.Context, req *pubsubpb.PublishRequest, opts ...grpc.CallOption) (*pubsubpb.PublishResponse, error) {
	c.sizes = append(c.sizes, len(req.Messages)) // one sender: MaxInFlightBatches is 1
	return c.PublisherClient.Publish(ctx, req, opts...)
}

// NewFromClient takes a PublisherClient of the caller's: here one that
// records the batches the Publisher sends.
func ExampleNewFromClient() {
	srv, topic := server()
	defer srv.Close()

	client := &countingClient{PublisherClient: pubsubpb.NewPublisherClient(srv.ClientConn())}
	p, err := publisher.NewFromClient(client, topic, publisher.Config{MaxMessages: 10, Delay: time.Minute, MaxInFlightBatches: 1})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 25 {
		p.Publish(context.Background(), &publisher.Message{Data: fmt.Appendf(nil, "m%d", i)})
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("batches:", client.sizes)
	// Output: batches: [10 10 5]
}

func ExamplePublisher_Publish() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{EnableOrdering: true})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	ctx := context.Background()
	var results []*publisher.Result
	for _, step := range []string{"created", "paid", "shipped"} {
		results = append(results, p.Publish(ctx, &publisher.Message{
			Data:        []byte(step),
			Attributes:  map[string]string{"order": "42"},
			OrderingKey: "order-42",
		}))
	}
	for _, r := range results {
		id, err := r.Get(ctx)
		fmt.Println(id, err)
	}
	// Output:
	// 1 <nil>
	// 2 <nil>
	// 3 <nil>
}

func ExamplePublisher_ResumePublish() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{EnableOrdering: true})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()

	srv.FailNext("Publish", 1, codes.PermissionDenied)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("a"), OrderingKey: "k"}).Get(ctx)
	fmt.Println("first:", err != nil)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("b"), OrderingKey: "k"}).Get(ctx)
	fmt.Println("paused:", errors.Is(err, publisher.ErrPaused))

	p.ResumePublish("k")
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("b"), OrderingKey: "k"}).Get(ctx)
	fmt.Println("after resume:", err)
	// Output:
	// first: true
	// paused: true
	// after resume: <nil>
}

func ExamplePublisher_Flush() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{Delay: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	r := p.Publish(context.Background(), &publisher.Message{Data: []byte("x")})
	if err := p.Flush(context.Background()); err != nil {
		log.Fatal(err)
	}
	select {
	case <-r.Ready():
		fmt.Println("settled")
	default:
		fmt.Println("pending")
	}
	// Output: settled
}

func ExamplePublisher_Shutdown() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p.Publish(context.Background(), &publisher.Message{Data: []byte("x")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(p.Shutdown(ctx))
	// Output: <nil>
}

func ExampleStage() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	toMsg := func(s string) *publisher.Message { return &publisher.Message{Data: []byte(s)} }
	err = pipeline.Map(pipeline.From(pipeline.Slice("a", "b", "c")), publisher.Stage(p, toMsg, 100)).
		To(pipeline.ForEach(func(_ context.Context, o publisher.Outcome[string]) error {
			fmt.Println(o.In, o.Err)
			return nil
		}))
	fmt.Println(err)
	// Output:
	// a <nil>
	// b <nil>
	// c <nil>
	// <nil>
}

func ExampleConfig_Validate() {
	err := publisher.Config{MaxMessages: 5000}.Validate()
	fmt.Println(err)
	// Output: publisher: Config.MaxMessages 5000 must be within 0–1000 (0: 100)
}

func ExamplePublisher_Close() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{Delay: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	r := p.Publish(context.Background(), &publisher.Message{Data: []byte("x")})
	fmt.Println(p.Close()) // sends the open batch despite the minute's delay
	id, err := r.Get(context.Background())
	fmt.Println(id, err)
	_, err = p.Publish(context.Background(), &publisher.Message{Data: []byte("y")}).Get(context.Background())
	fmt.Println(err)
	// Output:
	// <nil>
	// 1 <nil>
	// publisher: closed
}

func ExamplePublisher_Stats() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		p.Publish(context.Background(), &publisher.Message{Data: []byte("x")})
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
	st := p.Stats()
	fmt.Println(st.Published, st.Failed, st.OutstandingMessages)
	// Output: 3 0 0
}

func ExampleResult_Get() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	r := p.Publish(context.Background(), &publisher.Message{}) // neither data nor attributes
	_, err = r.Get(context.Background())
	fmt.Println(errors.Is(err, publisher.ErrInvalidMessage))
	fmt.Println(err)
	// Output:
	// true
	// publisher: invalid message: message #0: Data: empty message: neither data nor attributes
}

// Ready lets a caller wait for many results at once, or for a result and
// something else.
func ExampleResult_Ready() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	r := p.Publish(context.Background(), &publisher.Message{Data: []byte("x")})
	select {
	case <-r.Ready():
		id, err := r.Get(context.Background()) // does not block now
		fmt.Println(id, err)
	case <-time.After(time.Minute):
		fmt.Println("timed out")
	}
	// Output: 1 <nil>
}

// With FailFast, Publish at the flow-control limit fails at once instead
// of waiting, so the caller can shed load.
func ExampleFlowConfig() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{
		Delay: time.Minute, // hold the batch open: its messages stay outstanding
		Flow:  publisher.FlowConfig{MaxMessages: 2, FailFast: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for i := range 3 {
		r := p.Publish(ctx, &publisher.Message{Data: fmt.Appendf(nil, "m%d", i)})
		select {
		case <-r.Ready():
			_, err := r.Get(ctx)
			fmt.Println(i, errors.Is(err, publisher.ErrFlowControlled))
		default:
			fmt.Println(i, "queued")
		}
	}
	// Output:
	// 0 queued
	// 1 queued
	// 2 true
}

// Retryable replaces the retry policy; here NOT_FOUND (a topic being
// created) is retried as well as the transient codes.
func ExampleConfig_retryable() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{
		Retryable: func(err error) bool {
			switch status.Code(err) {
			case codes.NotFound, codes.Unavailable:
				return true
			}
			return false
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	srv.FailNext("Publish", 1, codes.NotFound)
	id, err := p.Publish(context.Background(), &publisher.Message{Data: []byte("x")}).Get(context.Background())
	fmt.Println(id, err, p.Stats().Retries)
	// Output: 1 <nil> 1
}
