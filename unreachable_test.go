package pubsubflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// TestRunEndsWhenUnreachable: streams that never succeed end Run after
// ReconnectTimeout with the last status; meanwhile every attempt counts in
// Stats().Reconnects and Stats().LastError.
func TestRunEndsWhenUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.FailNext("StreamingPull", 1<<30, codes.Unavailable)
		s := e.subscriber(t, SubscriberConfig{ReconnectTimeout: time.Minute})
		start := time.Now()
		done := runAsync(context.Background(), s, 1, func(context.Context, *Message) error { return nil })
		time.Sleep(30 * time.Second)
		if st := s.Stats(); st.Reconnects == 0 || status.Code(st.LastError) != codes.Unavailable {
			t.Fatalf("after 30 s: %d reconnects, last error %v; want the attempts visible", st.Reconnects, st.LastError)
		}
		err := <-done
		var ue *source.UnreachableError
		if !errors.As(err, &ue) || status.Code(err) != codes.Unavailable {
			t.Fatalf("Run = %v, want *source.UnreachableError with UNAVAILABLE", err)
		}
		if took := time.Since(start); took < time.Minute || took > 2*time.Minute+time.Second {
			t.Fatalf("Run ended after %v, want 1 min plus at most one backoff delay", took)
		}
	})
}

// TestReceiveOverCallersLimitNamesTheOption: the terminal error of a
// message over the caller's connection limit says what to raise.
func TestReceiveOverCallersLimitNamesTheOption(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.srv.Publish(ctx, e.topic, pbMsg(make([]byte, 5<<20))); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(e.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sub, err := NewSubscriber(ctx, e.sub, SubscriberConfig{Conn: cc})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	err = sub.Run(ctx, 1, func(context.Context, *Message) error { return nil })
	var tl *source.ReceiveTooLargeError
	if !errors.As(err, &tl) || status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "grpc.MaxCallRecvMsgSize") {
		t.Fatalf("Run = %v, want a *source.ReceiveTooLargeError naming grpc.MaxCallRecvMsgSize", err)
	}
}
