package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/publisher"
)

// A message the service would refuse fails at once, before it is queued,
// with an error naming the message, the field and the limit; it is never
// sent, so it cannot fail the other messages of a batch.
func ExampleError() {
	srv, topic := server()
	defer srv.Close()
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	ok := p.Publish(ctx, &publisher.Message{Data: []byte("fine")})
	bad := p.Publish(ctx, &publisher.Message{Data: []byte("x"), Attributes: map[string]string{"k": strings.Repeat("v", 2000)}})

	_, err = bad.Get(ctx)
	var pe *publisher.Error
	fmt.Println(errors.As(err, &pe), pe.Kind == publisher.ErrInvalidMessage, status.Code(err))
	fmt.Println(err)
	_, err = ok.Get(ctx)
	fmt.Println("the other message:", err)
	// Output:
	// true true InvalidArgument
	// publisher: invalid message: message #1: Attributes["k"]: attribute value size: value of 2000 bytes, the limit is 1024
	// the other message: <nil>
}
