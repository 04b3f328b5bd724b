package source

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

// TestSettledOnlyReads: Settled on a message whose lease has lapsed
// reports false and changes nothing; an outcome set on it then becomes
// an expiry.
func TestSettledOnlyReads(t *testing.T) {
	rms := []*pubsubpb.ReceivedMessage{{AckId: "a", Message: &pubsubpb.PubsubMessage{MessageId: "1"}}}
	_, ms := decodeResponse(rms, "projects/p/subscriptions/s", nil, time.Now(), 20*time.Millisecond, nil, message.NewClock())
	m := ms[0]
	m.st.EndReceipt(m)
	deadline := time.Now().Add(10 * time.Second)
	for !m.st.Lapsed(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the 20 ms lease did not lapse in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if m.Settled() || m.Outcome() != Pending {
		t.Fatalf("lapsed message: Settled %v, outcome %v; want false, pending (Settled only reads)", m.Settled(), m.Outcome())
	}
	if m.Ack() || m.Outcome() != Expired || !m.Settled() {
		t.Fatalf("ack of a lapsed copy: outcome %v, settled %v; want expired", m.Outcome(), m.Settled())
	}
}
