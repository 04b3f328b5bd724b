// Package ackids splits ack ids into request-sized chunks. Acknowledge and
// ModifyAckDeadline requests are limited to 512 KiB encoded, and ack ids can
// be long, so a count limit alone is not enough; both the acknowledger and
// the lease extender split with this one function.
package ackids

import "google.golang.org/protobuf/encoding/protowire"

const (
	// MaxIDs is the most ack ids one request carries (the clients' limit).
	MaxIDs = 1000
	// MaxBytes is the API's limit on an Acknowledge / ModifyAckDeadline
	// request's encoded size.
	MaxBytes = 512 * 1024
	// overhead leaves room for the subscription name and the deadline field.
	overhead = 1024
)

// EncodedSize is the bytes one ack id adds to a request: field tag, length
// varint and the id itself.
func EncodedSize(id string) int {
	return 1 + protowire.SizeVarint(uint64(len(id))) + len(id)
}

// Split calls emit for consecutive chunks of ids, each of at most maxIDs ids
// and at most maxBytes encoded (minus room for the other request fields).
// Zero limits mean MaxIDs and MaxBytes. emit must not keep the chunk past
// its return if the caller reuses ids.
func Split(ids []string, maxIDs, maxBytes int, emit func(chunk []string)) {
	if maxIDs <= 0 {
		maxIDs = MaxIDs
	}
	if maxBytes <= 0 {
		maxBytes = MaxBytes
	}
	start, size := 0, 0
	for i, id := range ids {
		n := EncodedSize(id)
		if i > start && (i-start >= maxIDs || size+n > maxBytes-overhead) {
			emit(ids[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(ids) {
		emit(ids[start:])
	}
}
