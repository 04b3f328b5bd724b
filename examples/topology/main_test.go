package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each ping is dropped and acked by the filter, each other message goes
// down exactly one branch; orders are totalled, the malformed ones
// nacked, events counted by kind a window at a time.
func TestTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	const n = 900
	tot, err := runEmbedded(ctx, &out, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	// i%300 == 0: 3 bad orders (0, 300, 600); other multiples of 3: 297
	// orders; of the rest, the multiples of 5: 120 pings; the other 480:
	// 240 views (even) and 240 clicks (odd).
	var wantCents int64
	for i := 3; i < n; i += 3 {
		if i%300 != 0 {
			wantCents += int64(i)
		}
	}
	if tot.BadOrders != 3 || tot.Orders != 297 || tot.OrderCents != wantCents {
		t.Errorf("orders %+v; want 297 valid totalling %d, 3 bad", tot, wantCents)
	}
	if tot.Pings != 120 {
		t.Errorf("pings %d; want 120 dropped", tot.Pings)
	}
	if tot.Events["view"] != 240 || tot.Events["click"] != 240 || len(tot.Events) != 2 {
		t.Errorf("events %v; want 240 views and 240 clicks", tot.Events)
	}
	if tot.Windows < 1 {
		t.Errorf("%d windows; want at least one", tot.Windows)
	}
}
