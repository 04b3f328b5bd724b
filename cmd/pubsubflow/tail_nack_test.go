package main

import (
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// tail --nack nacks each message once printed: the subscription redelivers
// it at once, so the same message is printed again, and nothing is acked.
func TestTailNack(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	ids := s.publish(t, &pubsubpb.PubsubMessage{Data: []byte("again")})
	code, stdout, stderr := cli(t, "", append([]string{"tail", s.sub, "--nack", "--max", "3"}, s.endpoint()...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := parseTail(t, stdout)
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout)
	}
	for _, l := range lines {
		if l.ID != ids[0] || l.Data == nil || *l.Data != "again" {
			t.Fatalf("line %+v; want message %s each time", l, ids[0])
		}
	}
	// Every delivery is nacked, the printed three and any that arrived
	// before the command stopped (nacked as it stopped).
	if st := s.srv.SubscriptionStats(s.sub); st.Acked != 0 || st.Nacked < 3 || st.Nacked != st.Delivered || st.Backlog != 1 || st.Outstanding != 0 {
		t.Fatalf("server: %+v; want every delivery (at least 3) nacked, nothing acked, the message back in the backlog", st)
	}
}
