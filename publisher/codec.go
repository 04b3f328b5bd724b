package publisher

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Request buffer classes: a request is marshalled into a buffer whose
// capacity is the next power of two of its size, from 2^minBufClass
// (4 KiB) to 2^maxBufClass (16 MiB, above the service's 10 MB request
// limit); a larger one, which the limits never let through, is allocated
// and not pooled.
const (
	minBufClass = 12
	maxBufClass = 24
)

// requestCodec marshals Publish requests as gRPC's proto codec does
// (proto.Size, then a marshal that reuses the sizes: the same bytes,
// under the same content subtype "proto") but into requestBuffers, and
// decodes Publish responses itself (decodeIDs), leaving any other message
// to gRPC's codec.
//
// gRPC's default buffer pool rounds a request up to one of 256 B, 4 KiB,
// 16 KiB, 32 KiB and 1 MiB and zeroes the whole buffer on every Get: a
// batch of 100 messages of 1 KiB (about 103 KB) takes a 1 MiB buffer and
// clears all of it, which was a tenth of the CPU of publishing 1 KiB
// messages over loopback. Here it takes a 128 KiB buffer, not zeroed:
// marshalling writes every byte of the length handed out (Marshal checks
// it), so no byte of an earlier request is sent.
type requestCodec struct{}

// publishCodec is the call option every Publish RPC is sent with.
var publishCodec = grpc.ForceCodecV2(requestCodec{})

// requestBuffers is the pool behind requestCodec: one sync.Pool per
// class, so what it holds is bounded as any sync.Pool is (the collector
// drops it) and what is in use is bounded by MaxInFlightBatches requests.
var requestBuffers bufferPool

type bufferPool struct{ classes [maxBufClass + 1]sync.Pool }

// bufClass is the class of a buffer for n bytes: the smallest power of two
// at least n, and at least 2^minBufClass.
func bufClass(n int) int { return max(bits.Len(uint(n-1)), minBufClass) }

// Get returns a buffer of length n whose bytes are not zeroed.
func (p *bufferPool) Get(n int) *[]byte {
	c := bufClass(n)
	if c > maxBufClass {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

// Put takes back a buffer Get returned; others are dropped.
func (p *bufferPool) Put(b *[]byte) {
	c := bufClass(cap(*b))
	if cap(*b) == 1<<c && c <= maxBufClass {
		p.classes[c].Put(b)
	}
}

// Marshal encodes v (a proto message) into a buffer of requestBuffers, or,
// at or below gRPC's pooling threshold, as gRPC's codec does.
func (requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("publisher: marshal: %T is not a proto message", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return protoCodec().Marshal(v)
	}
	buf := requestBuffers.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err == nil && len(out) != size {
		// The message changed between Size and Marshal (modified after
		// Publish): the buffer would hold stale bytes past len(out).
		err = fmt.Errorf("publisher: marshal: %d bytes encoded, %d sized (modified during Publish?)", len(out), size)
	}
	if err != nil {
		requestBuffers.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, &requestBuffers)}, nil
}

// Unmarshal decodes a Publish response with decodeIDs, and anything else
// (or a response decodeIDs declines) with gRPC's proto codec.
func (requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if resp, ok := v.(*pubsubpb.PublishResponse); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		ids, ok := decodeIDs(buf.ReadOnlyData())
		buf.Free()
		if ok {
			resp.Reset()
			resp.MessageIds = ids
			return nil
		}
	}
	return protoCodec().Unmarshal(data, v)
}

// decodeIDs decodes a Publish response that holds only message ids (field
// 1, valid UTF-8: what proto.Unmarshal accepts for it) in two allocations
// whatever the batch's size: one string holding every id, which the ids
// slice, and a slice of exactly as many. proto.Unmarshal would take one
// string per id (a message's only allocation on the Publisher's side) and
// a slice that grows seven times for a batch of 100. An id kept alive
// keeps its batch's ids (a few bytes each) alive with it. Anything else
// in b (another field, a malformed or invalid id) is declined (ok false),
// for proto.Unmarshal to decode or reject.
func decodeIDs(b []byte) (ids []string, ok bool) {
	n, size := 0, 0
	for p := b; len(p) > 0; n++ {
		id, rest, ok := nextID(p)
		if !ok || !utf8.Valid(id) {
			return nil, false
		}
		size += len(id)
		p = rest
	}
	if n == 0 {
		return nil, true // as proto.Unmarshal leaves an empty response
	}
	var sb strings.Builder // its String is its buffer, not a copy
	sb.Grow(size)
	for p := b; len(p) > 0; {
		id, rest, _ := nextID(p)
		sb.Write(id)
		p = rest
	}
	all, at := sb.String(), 0
	ids = make([]string, n)
	for i, p := 0, b; len(p) > 0; i++ {
		id, rest, _ := nextID(p)
		ids[i] = all[at : at+len(id)]
		at += len(id)
		p = rest
	}
	return ids, true
}

// nextID consumes one message id (field 1, length-delimited) from the
// front of b; ok is false for anything else.
func nextID(b []byte) (id, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, nil, false
	}
	id, m := protowire.ConsumeBytes(b[n:])
	if m < 0 {
		return nil, nil, false
	}
	return id, b[n+m:], true
}

// Name is the content subtype, gRPC's proto codec's.
func (requestCodec) Name() string { return grpcproto.Name }

// protoCodec is gRPC's proto codec, registered by its package's init.
func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }
