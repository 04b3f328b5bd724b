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

// The program's default run handles and acks every message once.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := runEmbedded(ctx, &out, 250); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), "handled 250 messages") || !strings.Contains(out.String(), "server: 250 acked, 0 redelivered") {
		t.Fatalf("output:\n%s", out.String())
	}
}
