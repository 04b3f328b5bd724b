package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every ack is confirmed by the server, the injected transient failures
// included (they are retried), and nothing is redelivered.
func TestExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	c, err := runEmbedded(ctx, &out, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	if c.Confirmed != 100 || c.Failed != 0 || c.NoResult != 0 {
		t.Fatalf("counts %+v; want 100 confirmed, 0 failed, all with a result", c)
	}
	if c.RPCErrors == 0 {
		t.Fatalf("counts %+v: the transient failures were not injected", c)
	}
	if !strings.Contains(out.String(), "server: 100 acked, 100 delivered, 0 redelivered") {
		t.Fatalf("output:\n%s", out.String())
	}
}
