package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every key's messages are processed once each, in publish order, one at
// a time, while different keys overlap.
func TestOrdering(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := runEmbedded(ctx, &out, 6, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	if len(res.Order) != 6 {
		t.Fatalf("%d keys processed, want 6", len(res.Order))
	}
	for k, seq := range res.Order {
		if len(seq) != 10 {
			t.Errorf("key %s: %d messages, want 10", k, len(seq))
		}
	}
	if !inOrder(res.Order) {
		t.Errorf("out of order: %v", res.Order)
	}
	if res.MaxPerKey != 1 {
		t.Errorf("%d messages of one key at once, want 1", res.MaxPerKey)
	}
	if res.MaxConcurrent < 2 {
		t.Errorf("at most %d at once: keys did not run in parallel", res.MaxConcurrent)
	}
}
