package proptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// ackerChecks is the CI default of TestAcknowledgerSplitting's cases.
const ackerChecks = 300

// TestAcknowledgerSplitting feeds an ack.Acknowledger random acks, nacks,
// delayed nacks and modacks — up to 3000 ack ids of up to 3000 bytes
// each, so that both the 1000-id and the 512 KiB limits are reached — with
// flushes in between and transient failures of the first calls, and
// checks, against a recording SubscriberClient that may be slow (so that
// every in-flight slot is busy and ack ids pile up), in virtual time:
//   - every request has at most 1000 ack ids and at most 512 KiB encoded;
//   - every ack id reaches the server exactly once, with its kind and
//     deadline (an ack as Acknowledge, a nack as ModifyAckDeadline 0, a
//     delayed nack as its delay rounded up to whole seconds), retries of
//     failed calls included (invariant 3);
//   - requests are full: per kind and deadline, at most twice the lower
//     bound ceil(ids/1000) + ceil(bytes/512 KiB), plus one partial request
//     per explicit flush and per moment the kind had no request in flight
//     (the acknowledger sends at once when idle, and otherwise coalesces
//     behind the request in flight: no timer cuts requests short).
func TestAcknowledgerSplitting(t *testing.T) {
	check(t, ackerChecks, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) { runAcker(rt) })
	})
}

// op is one ack id given to the acknowledger and what must reach the
// server for it.
type op struct {
	id      string
	ack     bool  // Acknowledge; otherwise ModifyAckDeadline
	seconds int32 // for ModifyAckDeadline
}

// ackStub is a SubscriberClient that records Acknowledge and
// ModifyAckDeadline requests and fails the first calls.
type ackStub struct {
	pubsubpb.SubscriberClient // nil: other methods are not used
	mu                        sync.Mutex
	failLeft                  int
	latency                   time.Duration
	calls                     int
	sent                      map[string][]op // ack id → what succeeded for it
	requests                  map[string]int  // "ack" or "modack N" → successful requests
	violations                []string
	// inFlight counts the calls of each method now; idle counts the
	// moments a call started with none of its method in flight.
	inFlight, idle map[bool]int
}

func (s *ackStub) record(kind string, ids []string, size int, o op) error {
	s.mu.Lock()
	if s.inFlight[o.ack] == 0 {
		s.idle[o.ack]++
	}
	s.inFlight[o.ack]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight[o.ack]--
		s.mu.Unlock()
	}()
	// A slow server fills the acknowledger's in-flight slots, so that ack
	// ids pile up into fuller batches. The sleep is virtual (synctest), so a
	// call stays in flight for as long as the test adds ack ids: the piling
	// up does not depend on scheduling.
	time.Sleep(s.latency)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(ids) > ackids.MaxIDs || size > limits.MaxAckRequestBytes {
		s.violations = append(s.violations, fmt.Sprintf("%s request with %d ack ids, %d bytes", kind, len(ids), size))
	}
	if s.failLeft > 0 {
		s.failLeft--
		return status.Error(codes.Unavailable, "proptest: injected")
	}
	s.requests[kind]++
	for _, id := range ids {
		o.id = id
		s.sent[id] = append(s.sent[id], o)
	}
	return nil
}

func (s *ackStub) Acknowledge(_ context.Context, in *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, s.record("ack", in.GetAckIds(), proto.Size(in), op{ack: true})
}

func (s *ackStub) ModifyAckDeadline(_ context.Context, in *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	kind := fmt.Sprintf("modack %d", in.GetAckDeadlineSeconds())
	return &emptypb.Empty{}, s.record(kind, in.GetAckIds(), proto.Size(in), op{seconds: in.GetAckDeadlineSeconds()})
}

// ackerCase is what one case of TestAcknowledgerSplitting draws.
type ackerCase struct {
	N, MaxLen, Flushes, Kinds, Failures, MaxInFlight int
	Seed                                             uint64
	Latency                                          time.Duration
}

func runAcker(t *rapid.T) {
	// pileUp: one slot in flight, no flush, thousands of acks: they pile
	// up behind the first request, the case where splitting matters most.
	pileUp := rapid.IntRange(0, 3).Draw(t, "pileUp") == 0
	c := ackerCase{N: rapid.IntRange(1, 100).Draw(t, "ackIDs")}
	if pileUp || rapid.IntRange(0, 2).Draw(t, "big") == 0 {
		c.N = rapid.IntRange(900, 3000).Draw(t, "bigAckIDs")
	}
	c.MaxLen = rapid.SampledFrom([]int{20, 300, 3000}).Draw(t, "maxIDLength")
	c.Seed = rapid.Uint64().Draw(t, "seed")
	c.Flushes = rapid.IntRange(0, 3).Draw(t, "flushes")
	c.Kinds = rapid.IntRange(1, 4).Draw(t, "kinds") // 1: acks only
	c.Failures = rapid.IntRange(0, 3).Draw(t, "failures")
	// A slow server and few slots in flight make ack ids pile up beyond
	// one request's worth, which the splitting must cut.
	c.Latency = rapid.SampledFrom([]time.Duration{10 * time.Millisecond, 300 * time.Millisecond}).Draw(t, "latency")
	c.MaxInFlight = rapid.SampledFrom([]int{1, 2, ack.DefaultMaxInFlight}).Draw(t, "maxInFlight")
	if pileUp {
		c.MaxInFlight, c.Flushes, c.Kinds = 1, 0, 1
	}
	runAckerCase(t, c)
}

func runAckerCase(t *rapid.T, c ackerCase) {
	n, maxLen, seed, flushes, kinds := c.N, c.MaxLen, c.Seed, c.Flushes, c.Kinds
	stub := &ackStub{
		failLeft: c.Failures,
		latency:  c.Latency,
		sent:     map[string][]op{},
		requests: map[string]int{},
		inFlight: map[bool]int{},
		idle:     map[bool]int{},
	}
	cfg := ack.Config{MaxInFlight: c.MaxInFlight}
	a, err := ack.New(stub, "projects/p/subscriptions/s", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()

	// The ids and kinds come from a seeded generator: thousands of draws
	// would make rapid's cases slow to shrink, and their values do not
	// matter, only their lengths and how they are grouped.
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	want := make([]op, n)
	need := map[string]int{}        // kind → ack ids
	bestEffort := map[string]bool{} // nacks: given up if they fail once Close began
	bytes := map[string]int{}       // kind → encoded bytes
	for i := range want {
		id := fmt.Sprintf("%d-", i) + strings.Repeat("x", rng.IntN(maxLen))
		o := op{id: id}
		var kind string
		switch rng.IntN(kinds) {
		case 0:
			o.ack = true
			a.AckTag(id, false, nil)
			kind = "ack"
		case 1:
			a.NackTag(id, 0, false, nil)
			kind = "modack 0"
			bestEffort[id] = true
		case 2:
			d := time.Duration(rng.IntN(600_000)+1) * time.Millisecond
			o.seconds = ack.DelaySeconds(d)
			a.NackTag(id, d, false, nil)
			kind = fmt.Sprintf("modack %d", o.seconds)
			bestEffort[id] = true
		default:
			o.seconds = int32(rng.IntN(3)*295 + 10) // a few shared deadlines (10, 305, 600 s)
			a.ModackTags([]string{id}, o.seconds, false, nil)
			kind = fmt.Sprintf("modack %d", o.seconds)
		}
		want[i] = o
		need[kind]++
		bytes[kind] += ackids.EncodedSize(id)
		if flushes > 0 && i > 0 && i%(n/(flushes+1)+1) == 0 {
			if err := a.Flush(context.Background()); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}

	stub.mu.Lock()
	defer stub.mu.Unlock()
	for _, v := range stub.violations {
		t.Fatalf("limits: %s", v)
	}
	for _, o := range want {
		got := stub.sent[o.id]
		if len(got) == 0 && bestEffort[o.id] && c.Failures > 0 {
			continue // a nack that failed while closing is not retried
		}
		if len(got) != 1 || got[0] != o {
			t.Fatalf("invariant 3: ack id %.20s… (ack %v, %d s) reached the server as %v", o.id, o.ack, o.seconds, got)
		}
	}
	for kind, ids := range need {
		lower := (ids+ackids.MaxIDs-1)/ackids.MaxIDs + (bytes[kind]+ackids.MaxBytes-1)/ackids.MaxBytes
		idle := stub.idle[kind == "ack"]
		if got, most := stub.requests[kind], 2*lower+flushes+idle; got > most {
			t.Fatalf("splitting: %d %q requests for %d ack ids of %d bytes (at most %d: lower bound %d, %d flushes, %d idle moments)",
				got, kind, ids, bytes[kind], most, lower, flushes, idle)
		}
	}
}
