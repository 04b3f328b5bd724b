package publisher

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxMessages: 1001}, "MaxMessages"},
		{Config{MaxMessages: -1}, "MaxMessages"},
		{Config{MaxBytes: limits.MaxRequestBytes + 1}, "MaxBytes"},
		{Config{Delay: -time.Second}, "Delay"},
		{Config{MaxInFlightBatches: -1}, "MaxInFlightBatches"},
		{Config{Flow: FlowConfig{MaxMessages: -2}}, "Flow.MaxMessages"},
		{Config{Flow: FlowConfig{MaxBytes: -2}}, "Flow.MaxBytes"},
		{Config{RetryDeadline: -1}, "RetryDeadline"},
		{Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "BackoffMin"},
		{Config{Hedging: HedgingConfig{Delay: -1}}, "Hedging.Delay"},
		{Config{Hedging: HedgingConfig{Delay: 2 * time.Minute}}, "Hedging.Delay"},
		{Config{Hedging: HedgingConfig{MaxExtra: 6}}, "Hedging.MaxExtra"},
		{Config{Hedging: HedgingConfig{Tokens: -1}}, "Hedging.Tokens"},
		{Config{Hedging: HedgingConfig{SuccessesPerToken: 1001}}, "Hedging.SuccessesPerToken"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	d := Config{}.withDefaults()
	if h := d.Hedging; h.Delay != 0 || h.MaxExtra != 1 || h.Tokens != 10 || h.SuccessesPerToken != 10 {
		t.Fatalf("hedging defaults %+v", h)
	}
	if d.MaxMessages != 100 || d.MaxBytes != 1_000_000 || d.Delay != 10*time.Millisecond || d.RetryDeadline != time.Minute {
		t.Fatalf("defaults %+v", d)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	client := pubsubpb.NewPublisherClient(nil)
	for _, topic := range []string{"", "t", "projects/p/topics/", "projects//topics/topic", "projects/p/subscriptions/sub"} {
		if _, err := NewFromClient(client, topic, Config{}); err == nil {
			t.Errorf("topic %q accepted", topic)
		}
	}
	if _, err := NewFromClient(client, "projects/p/topics/topic", Config{MaxMessages: 5000}); err == nil {
		t.Error("bad config accepted")
	}
	if _, err := New(nil, "projects/p/topics/topic", Config{}); err == nil {
		t.Error("nil connection accepted")
	}
}

// TestNilLoggerIsSlogDefault: a nil Logger means slog.Default(), as in
// every config of the module.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	if got := (Config{}).withDefaults().Logger; got != slog.Default() {
		t.Fatalf("nil Logger became %v, want slog.Default()", got)
	}
}
