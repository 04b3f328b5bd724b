package source

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{Subscription: testSub}
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" = valid
	}{
		{"zero", func(*Config) {}, ""},
		{"empty sub", func(c *Config) { c.Subscription = "" }, "want projects/PROJECT/subscriptions/ID"},
		{"short sub", func(c *Config) { c.Subscription = "s" }, "want projects/PROJECT/subscriptions/ID"},
		{"topic name", func(c *Config) { c.Subscription = "projects/p/topics/topic" }, "want projects/PROJECT/subscriptions/ID"},
		{"extra part", func(c *Config) { c.Subscription = testSub + "/x" }, "want projects/PROJECT/subscriptions/ID"},
		{"space in id", func(c *Config) { c.Subscription = "projects/p/subscriptions/a b" }, "subscription"},
		{"deadline low", func(c *Config) { c.StreamAckDeadline = 5 * time.Second }, "StreamAckDeadline"},
		{"deadline high", func(c *Config) { c.StreamAckDeadline = 601 * time.Second }, "StreamAckDeadline"},
		{"deadline ok", func(c *Config) { c.StreamAckDeadline = 600 * time.Second }, ""},
		{"streams", func(c *Config) { c.Streams = MaxStreams + 1 }, "Streams"},
		{"negative streams", func(c *Config) { c.Streams = -1 }, "Streams"},
		{"heartbeat", func(c *Config) { c.HeartbeatInterval = -1 }, "HeartbeatInterval"},
		{"timeout", func(c *Config) { c.HeartbeatTimeout = -1 }, "HeartbeatTimeout"},
		{"client id", func(c *Config) { c.ClientID = strings.Repeat("x", MaxClientIDLength+1) }, "ClientID"},
		{"negative backoff", func(c *Config) { c.Backoff.Initial = -time.Second }, "Backoff"},
		{"shrinking backoff", func(c *Config) { c.Backoff.Multiplier = 0.5 }, "Backoff"},
		{"negative drain", func(c *Config) { c.DrainTimeout = -time.Nanosecond }, "DrainTimeout"},
		{"long drain", func(c *Config) { c.DrainTimeout = time.Hour }, ""},
		{"unlimited", func(c *Config) { c.MaxOutstandingMessages, c.MaxOutstandingBytes = Unlimited, Unlimited }, ""},
		{"messages below Unlimited", func(c *Config) { c.MaxOutstandingMessages = -2 }, "MaxOutstandingMessages"},
		{"bytes below Unlimited", func(c *Config) { c.MaxOutstandingBytes = -100 }, "MaxOutstandingBytes"},
		{"reconnect timeout below Unlimited", func(c *Config) { c.ReconnectTimeout = -time.Second }, "ReconnectTimeout"},
	} {
		cfg := ok
		c.mod(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := Subscribe(nil, ok); err == nil {
		t.Error("Subscribe(nil client): want an error")
	}
	if _, err := Subscribe(&capturingClient{}, Config{}); err == nil {
		t.Error("Subscribe with an empty subscription: want an error")
	}
}

func TestDefaults(t *testing.T) {
	c := Config{Subscription: testSub}.withDefaults()
	if c.StreamAckDeadline != 60*time.Second || c.MaxOutstandingMessages != 1000 || c.MaxOutstandingBytes != 100<<20 ||
		c.Streams != 1 || c.HeartbeatInterval != 30*time.Second || c.HeartbeatTimeout != 15*time.Second ||
		c.DrainTimeout != 30*time.Second || c.Classify == nil || c.Logger == nil {
		t.Fatalf("defaults = %+v", c)
	}
}
