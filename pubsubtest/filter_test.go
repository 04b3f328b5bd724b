package pubsubtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// filterMessages are published to every filtered subscription of the
// filter table; the data names each one.
var filterMessages = []map[string]string{
	nil,                            // m0
	{"k": "v"},                     // m1
	{"k": "w"},                     // m2
	{"k": "vx", "other": "1"},      // m3
	{"other": "1"},                 // m4
	{"my.key": "a"},                // m5
	{"k": "v", "other": "2"},       // m6
	{"k": "", "quote": `say "hi"`}, // m7
}

func TestGoogleClientFilters(t *testing.T) {
	long := "attributes:k" + strings.Repeat(" OR attributes:k", 16) // 268 bytes
	tests := []struct {
		filter string
		want   []int  // messages delivered
		errPos int    // > 0: INVALID_ARGUMENT naming this position
		errMsg string // … and this text
	}{
		{filter: `attributes:k`, want: []int{1, 2, 3, 6, 7}},
		{filter: `attributes.k = "v"`, want: []int{1, 6}},
		{filter: `attributes.k != "v"`, want: []int{0, 2, 3, 4, 5, 7}},
		{filter: `attributes.k = ""`, want: []int{7}},
		{filter: `attributes.k = "V"`, want: nil},
		{filter: `hasPrefix(attributes.k, "v")`, want: []int{1, 3, 6}},
		{filter: `hasPrefix(attributes.k, "")`, want: []int{1, 2, 3, 6, 7}},
		{filter: `NOT attributes:k`, want: []int{0, 4, 5}},
		{filter: `-attributes:k`, want: []int{0, 4, 5}},
		{filter: `attributes:k AND attributes:other`, want: []int{3, 6}},
		{filter: `attributes.k = "w" OR attributes.other = "1"`, want: []int{2, 3, 4}},
		{filter: `(attributes.k = "v" OR attributes.k = "w") AND NOT attributes:other`, want: []int{1, 2}},
		{filter: `NOT (attributes:k OR attributes:other)`, want: []int{0, 5}},
		{filter: `attributes:"my.key"`, want: []int{5}},
		{filter: `attributes."my.key" = "a"`, want: []int{5}},
		{filter: `attributes.k = "\x76"`, want: []int{1, 6}},
		{filter: `attributes.quote = "say \"hi\""`, want: []int{7}},
		{filter: "\tattributes:other\nAND -attributes.k = \"vx\"", want: []int{4, 6}},
		// Syntax errors, with the 1-based position where parsing failed.
		{filter: `attributes.k = v`, errPos: 16, errMsg: "string literal"},
		{filter: `attributes:k AND attributes:x OR attributes:y`, errPos: 31, errMsg: "parentheses"},
		{filter: `(attributes:k`, errPos: 14, errMsg: `expected ")"`},
		{filter: `hasPrefix(attributes.k)`, errPos: 23, errMsg: `expected ","`},
		{filter: `hasPrefix attributes.k`, errPos: 11, errMsg: `expected "(" after hasPrefix`},
		{filter: `hasPrefix(attrs.k, "v")`, errPos: 11, errMsg: `expected attributes.KEY`},
		{filter: `hasPrefix(attributes:k, "v")`, errPos: 21, errMsg: `expected "." after attributes`},
		{filter: `hasPrefix(attributes., "v")`, errPos: 22, errMsg: `expected an attribute key`},
		{filter: `hasPrefix(attributes.k, v)`, errPos: 25, errMsg: `expected a string literal`},
		{filter: `hasPrefix(attributes.k, "v"`, errPos: 28, errMsg: `expected ")"`},
		{filter: `attributes.k = "v`, errPos: 16, errMsg: "unterminated"},
		{filter: `attributes.k == "v"`, errPos: 15, errMsg: "string literal"},
		{filter: `attrs:k`, errPos: 1, errMsg: "expected attributes"},
		{filter: `attributes:k and attributes:x`, errPos: 14, errMsg: "unexpected"},
		{filter: `attributes.k = "\q"`, errPos: 16, errMsg: "escape"},
		{filter: `attributes:k AND`, errPos: 17, errMsg: "end of filter"},
		{filter: long, errPos: 257, errMsg: "256 bytes"},
	}

	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName("topic")}); err != nil {
		t.Fatal(err)
	}
	subs := map[int]string{}
	for i, tc := range tests {
		name := srv.subName(fmt.Sprintf("filter%d", i))
		_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: name, Topic: srv.topicName("topic"), Filter: tc.filter})
		if tc.errPos == 0 {
			if err != nil {
				t.Errorf("filter %q: %v", tc.filter, err)
			}
			subs[i] = name
			continue
		}
		wantCode(t, fmt.Sprintf("filter %q", tc.filter), err, codes.InvalidArgument, fmt.Sprintf("at position %d", tc.errPos), tc.errMsg)
	}

	var msgs []*pubsubpb.PubsubMessage
	for i, attrs := range filterMessages {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprint(i)), Attributes: attrs})
	}
	if _, err := c.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: srv.topicName("topic"), Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	for i, name := range subs {
		tc := tests[i]
		// A filter may match nothing: the Pull must then come back at once,
		// empty, rather than wait for a message.
		//lint:ignore SA1019 the empty answer needs return_immediately, which pubsubtest still honours
		resp, err := c.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: name, MaxMessages: 100, ReturnImmediately: true})
		if err != nil {
			t.Fatalf("Pull %q: %v", tc.filter, err)
		}
		var got []int
		for _, m := range resp.ReceivedMessages {
			var n int
			fmt.Sscan(string(m.Message.Data), &n)
			got = append(got, n)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("filter %q delivered %v, want %v", tc.filter, got, tc.want)
		}
		// The others were acknowledged at once: nothing else waits.
		st := srv.SubscriptionStats(name)
		if st.Filtered != int64(len(filterMessages)-len(tc.want)) || st.Backlog != 0 || st.Outstanding != int64(len(tc.want)) {
			t.Errorf("filter %q: stats %+v", tc.filter, st)
		}
	}

	// The filter is part of the subscription and cannot change.
	got, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: subs[1]})
	if err != nil || got.Filter != tests[1].filter {
		t.Errorf("GetSubscription = %v, %v", got, err)
	}
	_, err = c.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: subs[1], Filter: "attributes:other"},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"filter"}},
	})
	wantCode(t, "UpdateSubscription of the filter", err, codes.InvalidArgument, "filter")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "cannot be updated") {
		t.Errorf("UpdateSubscription of the filter: %q", msg)
	}
}

// TestFilterParse checks the parser alone on what the table above cannot
// show: the tree it builds.
func TestFilterParse(t *testing.T) {
	f, err := parseFilter(`NOT (attributes:a OR -attributes.b = "x") AND hasPrefix(attributes."c d", "p")`)
	if err != nil {
		t.Fatal(err)
	}
	want := filterAnd{filterNot{filterOr{filterHas{"a"}, filterNot{filterEq{key: "b", val: "x"}}}}, filterPrefix{key: "c d", prefix: "p"}}
	if fmt.Sprint(f) != fmt.Sprint(want) {
		t.Errorf("parsed %v, want %v", f, want)
	}
	if f, err := parseFilter(""); f != nil || err != nil {
		t.Errorf("empty filter = %v, %v", f, err)
	}
}
