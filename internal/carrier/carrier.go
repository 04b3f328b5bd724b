// Package carrier is the one implementation of the trace-context carrier
// shared by the Subscriber (pubsubflow.MessageCarrier) and the Publisher:
// the W3C trace context travels in a Pub/Sub message's attributes under
// the prefix Google's clients use, so traces join across clients.
package carrier

import "strings"

// Prefix is the attribute prefix under which Google's clients carry the
// trace context ("googclient_traceparent", …).
const Prefix = "googclient_"

// Carrier is a message's attributes as an OpenTelemetry
// propagation.TextMapCarrier.
type Carrier map[string]string

// Get returns the value of the prefixed key.
func (c Carrier) Get(key string) string { return c[Prefix+key] }

// Set sets the prefixed key.
func (c Carrier) Set(key, value string) { c[Prefix+key] = value }

// Keys lists the carrier's keys without their prefix.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		if rest, ok := strings.CutPrefix(k, Prefix); ok {
			keys = append(keys, rest)
		}
	}
	return keys
}
