// Package limits is the one table of the Pub/Sub service's documented
// limits and name rules (https://cloud.google.com/pubsub/quotas), used by
// every check in this module: the Publisher before it queues a message,
// pubsubtest when it answers an RPC, the Subscriber's and Publisher's name
// validation, the CLI, and the default dial's receive size.
package limits

// Unlimited is the module's one "no limit": every config and constructor
// that takes a limit (a flow-control budget, a max extension, a reconnect
// timeout) reads 0 as its documented default and Unlimited as none, and
// its Validate refuses any other negative value, as Google's clients read
// a negative limit. The public packages export it under the same name.
const Unlimited = -1

// The service's limits. Sizes are in bytes, as the service counts them
// (its error messages say "characters" but it counts UTF-8 bytes).
const (
	// MaxDataBytes is the largest message data the service accepts (10 MB).
	MaxDataBytes = 10_000_000
	// MaxRequestBytes is the largest encoded Publish request (10 MB, as
	// Google's clients count it); a message's data, attributes and ordering
	// key together must fit in one.
	MaxRequestBytes = 10_000_000
	// MaxRequestMessages is the most messages one Publish request carries.
	MaxRequestMessages = 1000
	// MaxAttributes is the most attributes one message carries.
	MaxAttributes = 100
	// MaxAttributeKeyBytes and MaxAttributeValueBytes bound one attribute.
	MaxAttributeKeyBytes   = 256
	MaxAttributeValueBytes = 1024
	// MaxOrderingKeyBytes bounds a message's ordering key.
	MaxOrderingKeyBytes = 1024
	// MaxAckRequestBytes is the largest Acknowledge or ModifyAckDeadline
	// request (512 KiB).
	MaxAckRequestBytes = 512 << 10
	// MinResourceIDLength and MaxResourceIDLength bound a topic,
	// subscription or snapshot id.
	MinResourceIDLength = 3
	MaxResourceIDLength = 255
	// MaxProjectIDLength bounds the project part of a resource name
	// (domain-scoped ids such as "example.com:proj" included).
	MaxProjectIDLength = 100
	// ReservedPrefix may not start a resource id or an attribute key,
	// except ClientAttributePrefix.
	ReservedPrefix = "goog"
	// ClientAttributePrefix starts the attribute keys Google's client
	// libraries set themselves (googclient_traceparent, the trace context
	// of their OpenTelemetry tracing, and ours; googclient_deliveryattempt)
	// and the service accepts.
	ClientAttributePrefix = "googclient_"

	// MaxReceiveMessageBytes is the receive limit our dials set (a gRPC
	// client's default is 4 MiB): a StreamingPull response carries up to a
	// 10 MB message plus its envelope, and Google's Go client dials with
	// 20 MiB for the same reason.
	MaxReceiveMessageBytes = 20 << 20
)

// Limit is one row of Table.
type Limit struct {
	Name  string // what is limited, in a user's words
	Value string // the limit
}

// Table lists the limits and rules for documentation (the CLI's --help and
// the README show the same rows).
var Table = []Limit{
	{"message data", "≤ 10,000,000 bytes"},
	{"publish request", "≤ 10,000,000 bytes encoded, ≤ 1,000 messages"},
	{"attributes per message", "≤ 100"},
	{"attribute key", "1–256 bytes of UTF-8, not starting with \"goog\" (\"googclient_\" is allowed)"},
	{"attribute value", "≤ 1,024 bytes of UTF-8"},
	{"ordering key", "≤ 1,024 bytes of UTF-8"},
	{"message", "data or at least one attribute"},
	{"topic / subscription id", "3–255 of A–Z a–z 0–9 - _ . ~ + %, starting with a letter, not with \"goog\""},
	{"project id", "a lowercase letter, then lowercase letters, digits, - . :, ending with a letter or digit (≤ 100)"},
	{"received message (our dial)", "≤ 20 MiB per gRPC message"},
}
