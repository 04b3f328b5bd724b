package publisher

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestPublishRequestsFitTheirBuffers: over real gRPC, every Publish RPC
// carries the Publisher's codec, which encodes the request to the bytes
// proto.Marshal gives, into a buffer less than twice its size: a batch of
// 100 messages of 1 KiB (about 103 KB) takes 128 KiB, where gRPC's
// default codec takes (and zeroes) a 1 MiB one.
func TestPublishRequestsFitTheirBuffers(t *testing.T) {
	e := newEnv(t)
	var checked atomic.Int64
	check := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Publish") {
			checkRequestEncoding(t, req.(*pubsubpb.PublishRequest), opts)
			checked.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := e.srv.Dial(context.Background(), grpc.WithUnaryInterceptor(check))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p, err := New(conn, e.topic, Config{MaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 1024)
	var rs []*Result
	for range 300 {
		rs = append(rs, p.Publish(ctx, &Message{Data: data}))
	}
	for _, r := range rs {
		mustGet(t, r)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if checked.Load() < 3 {
		t.Fatalf("%d Publish RPCs seen, want at least 3", checked.Load())
	}
}

// checkRequestEncoding fails t unless opts hold the Publisher's codec and
// it encodes req as proto.Marshal does, into a buffer under twice its size.
func checkRequestEncoding(t *testing.T, req *pubsubpb.PublishRequest, opts []grpc.CallOption) {
	t.Helper()
	var codec grpc.ForceCodecV2CallOption
	found := false
	for _, o := range opts {
		if c, ok := o.(grpc.ForceCodecV2CallOption); ok {
			codec, found = c, true
		}
	}
	if !found {
		t.Errorf("a Publish of %d messages was sent with gRPC's default codec (its buffer pool: 1 MiB, zeroed, for a 100 KB request)", len(req.Messages))
		return
	}
	want, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := codec.CodecV2.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Free()
	if len(bs) != 1 {
		t.Fatalf("request encoded in %d buffers, want 1", len(bs))
	}
	got := bs[0].ReadOnlyData()
	if !bytes.Equal(got, want) {
		t.Errorf("request encoded to %d bytes that differ from proto.Marshal's %d", len(got), len(want))
	}
	if len(want) > 4096 && cap(got) >= 2*len(want) {
		t.Errorf("a request of %d bytes encoded into a buffer of %d", len(want), cap(got))
	}
}

// TestRequestBuffersHoldNoStaleBytes: the pool does not zero its buffers,
// so a request encoded into one a larger request used before must still
// be exactly its own bytes (marshalling writes all of them).
func TestRequestBuffersHoldNoStaleBytes(t *testing.T) {
	req := func(n, size int, b byte) *pubsubpb.PublishRequest {
		r := &pubsubpb.PublishRequest{Topic: "projects/p/topics/t"}
		for range n {
			r.Messages = append(r.Messages, &pubsubpb.PubsubMessage{Data: bytes.Repeat([]byte{b}, size), OrderingKey: "k"})
		}
		return r
	}
	big, small := req(100, 1200, 'a'), req(90, 1000, 'b') // both in the 128 KiB class
	if bufClass(proto.Size(big)) != bufClass(proto.Size(small)) {
		t.Fatalf("classes %d and %d: the test wants one", bufClass(proto.Size(big)), bufClass(proto.Size(small)))
	}
	want, err := proto.Marshal(small)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		for _, r := range []*pubsubpb.PublishRequest{big, small} {
			bs, err := requestCodec{}.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if r == small && !bytes.Equal(bs.Materialize(), want) {
				t.Fatalf("round %d: the small request's encoding differs from proto.Marshal's", i)
			}
			bs.Free()
		}
	}
}

// TestRequestBufferClasses: a buffer is the next power of two of its
// size, 4 KiB at least; Put keeps only buffers of a class.
func TestRequestBufferClasses(t *testing.T) {
	for _, c := range []struct{ n, class int }{{1, 12}, {4096, 12}, {4097, 13}, {103_000, 17}, {1 << 20, 20}, {10_000_000, 24}} {
		if got := bufClass(c.n); got != c.class {
			t.Errorf("bufClass(%d) = %d, want %d", c.n, got, c.class)
		}
		b := requestBuffers.Get(c.n)
		if len(*b) != c.n || cap(*b) != 1<<c.class {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", c.n, len(*b), cap(*b), 1<<c.class)
		}
		requestBuffers.Put(b)
	}
	if b := requestBuffers.Get(1<<maxBufClass + 1); cap(*b) != 1<<maxBufClass+1 {
		t.Errorf("a buffer above the largest class has cap %d, want its size", cap(*b))
	}
}

// TestResponseDecodingIsProtos: requestCodec decodes a Publish response
// to what proto.Unmarshal gives (the same ids, an error for the same
// inputs), declining to its own decoding what is not a plain list of ids.
func TestResponseDecodingIsProtos(t *testing.T) {
	marshal := func(ids ...string) []byte {
		b, err := proto.Marshal(&pubsubpb.PublishResponse{MessageIds: ids})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	many := make([]string, 1000)
	for i := range many {
		many[i] = strconv.Itoa(i * 7919)
	}
	cases := map[string][]byte{
		"empty":        nil,
		"one":          marshal("1"),
		"empty id":     marshal(""),
		"non-ASCII":    marshal("id-é-✓"),
		"1000":         marshal(many...),
		"unknown":      protowire.AppendString(protowire.AppendTag(marshal("1", "2"), 2, protowire.BytesType), "x"),
		"unknown only": protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 3),
		"invalid UTF8": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 'a'}),
		"truncated":    marshal("12345")[:4],
		"wrong type":   protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5),
	}
	for name, b := range cases {
		want := &pubsubpb.PublishResponse{}
		wantErr := proto.Unmarshal(b, want)
		// In one buffer, and split in two as frames may deliver it.
		for _, data := range []mem.BufferSlice{{mem.SliceBuffer(b)}, {mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}} {
			got := &pubsubpb.PublishResponse{MessageIds: []string{"stale"}}
			err := requestCodec{}.Unmarshal(data, got)
			if (err != nil) != (wantErr != nil) {
				t.Errorf("%s in %d buffers: error %v, proto.Unmarshal's %v", name, len(data), err, wantErr)
				continue
			}
			if err == nil && !proto.Equal(got, want) {
				t.Errorf("%s in %d buffers: decoded %v, proto.Unmarshal %v", name, len(data), got, want)
			}
		}
	}
}

// TestResponseDecodingAllocatesTheIDs: reading the response of a batch of
// 100 takes one string holding its 100 ids and one slice of exactly 100,
// not an allocation per id and the seven growing slices of
// proto.Unmarshal's appends.
func TestResponseDecodingAllocatesTheIDs(t *testing.T) {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(1_000_000_000 + i)
	}
	b, err := proto.Marshal(&pubsubpb.PublishResponse{MessageIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	var resp pubsubpb.PublishResponse
	allocs := testing.AllocsPerRun(100, func() {
		if err := (requestCodec{}).Unmarshal(data, &resp); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("decoding a response of 100 ids took %.0f allocations, want 2", allocs)
	}
	if len(resp.MessageIds) != 100 || cap(resp.MessageIds) != 100 || resp.MessageIds[99] != ids[99] {
		t.Errorf("decoded %d ids (cap %d), want the 100 sent", len(resp.MessageIds), cap(resp.MessageIds))
	}
}

// BenchmarkResponseDecoding reads the response of a batch of 100.
func BenchmarkResponseDecoding(b *testing.B) {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(1_000_000_000 + i)
	}
	enc, err := proto.Marshal(&pubsubpb.PublishResponse{MessageIds: ids})
	if err != nil {
		b.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(enc)}
	b.ReportAllocs()
	for b.Loop() {
		var resp pubsubpb.PublishResponse
		if err := (requestCodec{}).Unmarshal(data, &resp); err != nil {
			b.Fatal(err)
		}
	}
}
