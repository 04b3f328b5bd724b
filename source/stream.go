package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/connect"
	"github.com/pubsubflow/pubsubflow/event"
	"github.com/pubsubflow/pubsubflow/message"
)

// errStreamDone cancels a stream's context once its receiver has returned.
var errStreamDone = errors.New("pubsubflow/source: stream done")

// runStream is stream i's restart loop. It wraps only the gRPC stream:
// each pass opens one stream, receives until it fails, and then either
// waits a backoff delay and opens the next, or ends the source. It returns
// nil when ctx is done (a shutdown is not a failure).
func (s *Source) runStream(ctx context.Context, i int, out chan<- *message.Message) error {
	delays := s.cfg.Backoff.Start()
	attempt := 0
	var prev error // the previous failure in this run of failures
	for {
		healthy, err := s.connectOnce(ctx, i, out)
		if ctx.Err() != nil {
			return nil
		}
		if healthy {
			delays.Reset()
			attempt, prev = 0, nil
		}
		attempt++
		if s.cfg.Classify(failure(err, attempt, prev)) == Terminate {
			return s.terminal(i, err)
		}
		prev = err
		d, ok := delays.Next()
		if !ok {
			return s.terminal(i, err)
		}
		s.emit(event.Event{Kind: event.Reconnect, Stream: i, Delay: d, Err: err})
		s.cfg.Logger.Debug("pubsubflow: stream reconnects", "subscription", s.cfg.Subscription, "stream", i, "delay", d, "err", err)
		if !wait(ctx, d) {
			return nil
		}
	}
}

// terminal ends the source: the error names the subscription and wraps the
// stream's error, so status.Code still reports the gRPC code.
func (s *Source) terminal(i int, err error) error {
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "stream closed by the server without a status")
	}
	err = fmt.Errorf("pubsubflow: subscription %s: %w", s.cfg.Subscription, err)
	s.emit(event.Event{Kind: event.Terminal, Stream: i, Err: err})
	s.cfg.Logger.Warn("pubsubflow: subscription stream failed terminally", "subscription", s.cfg.Subscription, "stream", i, "err", err)
	return err
}

// connectOnce opens one stream, sends its initial request, and receives
// until the stream fails or ctx is done. healthy reports whether the
// stream received at least one response.
func (s *Source) connectOnce(ctx context.Context, i int, out chan<- *message.Message) (healthy bool, err error) {
	sctx, cancel := context.WithCancelCause(connect.WithRouting(ctx, "subscription", s.cfg.Subscription))
	defer cancel(errStreamDone)
	stream, err := s.client.StreamingPull(sctx)
	if err == nil {
		err = stream.Send(s.initialRequest(i))
		if errors.Is(err, io.EOF) {
			// Send reports only that the stream is gone; Recv has the status.
			_, err = stream.Recv()
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.emit(event.Event{Kind: event.ConnectFailed, Stream: i, Err: err})
		}
		return false, err
	}
	s.emit(event.Event{Kind: event.Connect, Stream: i})
	s.cfg.Logger.Debug("pubsubflow: stream open", "subscription", s.cfg.Subscription, "stream", i, "client_id", s.clientID)

	ka := newKeepalive(s, i)
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		ka.run(sctx, stream, cancel)
	}()
	healthy, err = s.receive(ctx, stream, ka, i, out)
	cancel(errStreamDone)
	<-kaDone
	if errors.Is(context.Cause(sctx), errHeartbeatTimeout) {
		err = status.Errorf(codes.DeadlineExceeded, "no response within %v after a heartbeat: %v", s.cfg.HeartbeatTimeout, errHeartbeatTimeout)
	}
	if ctx.Err() == nil {
		s.emit(event.Event{Kind: event.Disconnect, Stream: i, Err: err})
	}
	return healthy, err
}

// receive calls Recv only after every message of the previous response was
// handed on, so a stalled consumer stops the reads, which stalls the HTTP/2
// window and then the server. Hand-offs wait on the source's ctx, not the
// stream's, so a stream killed by the watchdog still hands on what it
// already received.
func (s *Source) receive(ctx context.Context, stream pubsubpb.Subscriber_StreamingPullClient, ka *keepalive, i int, out chan<- *message.Message) (healthy bool, err error) {
	var batch []*message.Message // one response's messages, reused
	for {
		ka.recvStart()
		resp, err := stream.Recv()
		ka.recvEnd(resp)
		if err != nil {
			return healthy, err
		}
		healthy = true
		if p := resp.GetSubscriptionProperties(); p != nil {
			s.props.Store(p)
		}
		msgs := resp.GetReceivedMessages()
		if len(msgs) == 0 {
			continue // a heartbeat answer or a confirmation
		}
		s.emit(event.Event{Kind: event.Received, Stream: i, Count: len(msgs)})
		now, props := time.Now(), s.props.Load()
		// Decode (and hook: the subscriber leases there) the whole response
		// before handing any of it on, so no message waits unleased behind
		// a slow consumer.
		batch = batch[:0]
		for _, rm := range msgs {
			m := message.FromReceived(rm, s.cfg.Subscription, props, now)
			if s.cfg.OnReceive != nil {
				s.cfg.OnReceive(m)
			}
			batch = append(batch, m)
		}
		for j, m := range batch {
			select {
			case out <- m:
			case <-ctx.Done():
				if s.cfg.Unsent != nil {
					s.cfg.Unsent(append([]*message.Message(nil), batch[j:]...))
				}
				clear(batch)
				return healthy, ctx.Err()
			}
		}
		clear(batch) // let handed-on messages be collected
	}
}

func (s *Source) emit(e event.Event) {
	e.Subscription = s.cfg.Subscription
	s.cfg.Events.Emit(e)
}

// wait waits d or until ctx is done; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
