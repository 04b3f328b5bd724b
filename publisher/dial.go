package publisher

import (
	"context"
	"errors"
	"fmt"

	"github.com/pubsubflow/pubsubflow/internal/connect"
)

// ConnectOptions configures Dial; it is the same type as
// pubsubflow.ConnectOptions, with the same conventions as the Subscriber:
// the zero value means the emulator named by PUBSUB_EMULATOR_HOST in
// plaintext when it is set, otherwise TLS to pubsub.googleapis.com:443
// with Application Default Credentials.
type ConnectOptions = connect.Options

// Dial connects to Pub/Sub with o and returns a Publisher for topic over
// that connection, which the Publisher owns: Close (or Shutdown) closes it
// after the last RPC. ctx bounds only the lookup of Application Default
// Credentials; the connection itself is made lazily. Use New to share a
// connection of your own.
func Dial(ctx context.Context, topic string, o ConnectOptions, cfg Config) (*Publisher, error) {
	conn, err := connect.Dial(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("publisher: connecting for %s: %w", topic, err)
	}
	p, err := New(conn, topic, cfg)
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	p.conn = conn
	return p, nil
}
