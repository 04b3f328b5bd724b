package source

import (
	"fmt"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"pgregory.net/rapid"
)

// TestIDSetFindsDuplicates: over responses of random ack ids (few distinct
// ones, so duplicates are common), reused set after set, add reports
// exactly the ids seen earlier in the same response.
func TestIDSetFindsDuplicates(t *testing.T) {
	var s idSet
	rapid.Check(t, func(rt *rapid.T) {
		ids := rapid.SliceOfN(rapid.IntRange(0, 40), 2, 300).Draw(rt, "ids")
		rms := make([]*pubsubpb.ReceivedMessage, len(ids))
		for i, id := range ids {
			rms[i] = &pubsubpb.ReceivedMessage{AckId: fmt.Sprintf("projects/p/subscriptions/s:%d", id)}
		}
		s.reset(len(rms))
		seen := map[string]bool{}
		for i, rm := range rms {
			if got, want := s.add(rms, i), !seen[rm.AckId]; got != want {
				rt.Fatalf("element %d (%s): add %v, want %v", i, rm.AckId, got, want)
			}
			seen[rm.AckId] = true
		}
	})
}
