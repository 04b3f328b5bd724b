package main

import (
	"context"
	"errors"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/proptest"
	"github.com/pubsubflow/pubsubflow/publisher"
)

// The relay's topology (Run's: the subscriber's source into
// pubsubflow.Forward with transform) checked by the state machine: besides
// the library's invariants, no input is acked before its output was
// published (the side effect), whatever fails and restarts meanwhile.
func TestRelayProperties(t *testing.T) {
	var out outputs
	proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
		topic, err := out.forCase(ctx, env)
		if err != nil {
			return err
		}
		pub, err := publisher.New(recordingConn{env.Server().ClientConn(), &out}, topic, publisher.Config{})
		if err != nil {
			return err
		}
		err = env.From(ctx).To(pubsubflow.Forward(pub, transform, 500))
		return errors.Join(err, pub.Close())
	}, proptest.Options{SideEffect: out.published})
}

// outputs records the inputs whose output the server has accepted, for
// the current case.
type outputs struct {
	mu    sync.Mutex
	env   *proptest.Env
	topic string
	ids   map[string]bool // input message id → its output was published
}

// forCase returns the output topic of env's case, creating it (and a
// fresh record) the first time.
func (o *outputs) forCase(ctx context.Context, env *proptest.Env) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.env != env {
		topic, err := env.Server().CreateTopic(ctx, outputTopic)
		if err != nil {
			return "", err
		}
		o.env, o.topic, o.ids = env, topic, map[string]bool{}
	}
	return o.topic, nil
}

// published is Options.SideEffect: was m's output published?
func (o *outputs) published(m *pubsubflow.Message) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ids[m.ID]
}

// recordingConn is the publisher's connection: it records the inputs of
// every Publish the server accepted.
type recordingConn struct {
	grpc.ClientConnInterface
	out *outputs
}

func (c recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if req, ok := args.(*pubsubpb.PublishRequest); ok && err == nil {
		c.out.mu.Lock()
		for _, m := range req.GetMessages() {
			c.out.ids[m.GetAttributes()["source-id"]] = true
		}
		c.out.mu.Unlock()
	}
	return err
}
