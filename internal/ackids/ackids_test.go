package ackids

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func TestSplitBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 5000).Draw(t, "n")
		idLen := rapid.IntRange(1, 400).Draw(t, "idLen")
		ids := make([]string, n)
		for i := range ids {
			ids[i] = strings.Repeat("a", idLen-1) + string(rune('a'+i%26))
		}
		total := 0
		Split(ids, 0, 0, func(chunk []string) {
			if len(chunk) == 0 || len(chunk) > MaxIDs {
				t.Fatalf("chunk of %d ids", len(chunk))
			}
			req := &pubsubpb.ModifyAckDeadlineRequest{
				Subscription:       "projects/p/subscriptions/" + strings.Repeat("s", 255),
				AckIds:             chunk,
				AckDeadlineSeconds: 600,
			}
			if sz := proto.Size(req); sz > MaxBytes {
				t.Fatalf("request of %d bytes", sz)
			}
			total += len(chunk)
		})
		if total != n {
			t.Fatalf("split %d of %d ids", total, n)
		}
	})
}
