package proptest

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// extenderChecks is the CI default of TestExtenderProperties' cases.
const extenderChecks = 60

// TestExtenderProperties drives a flow.Extender against pubsubtest in
// virtual time: messages pulled in batches of random sizes (up to 2500,
// over the 1000-id request limit) are tracked on receipt (EagerTrack's
// receipt step), then acked, nacked or held while time passes, with
// ModifyAckDeadline failing or slow within the safety margin. After every
// step:
//   - no lease the extender holds lapses at the server (invariant 1),
//     and the extender holds exactly the leases the model does;
//   - a lease is dropped (settled as Expired) only past the maximum
//     extension, and within a tick after it (invariant 3's "expired past
//     max extension");
//   - batching: every request has at most 1000 ack ids and 512 KiB, and
//     the leases due at one moment with one deadline go out in as few
//     requests as the limit allows (ceil(n/1000); a receipt flush and a
//     tick at the same instant are separate).
func TestExtenderProperties(t *testing.T) {
	check(t, extenderChecks, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			x := newExtenderModel(rt)
			defer x.teardown()
			rt.Repeat(map[string]func(*rapid.T){
				"":             x.check,
				"Pull":         x.pull,
				"Ack":          x.ack,
				"Nack":         x.nack,
				"Advance":      x.advance,
				"FailModacks":  x.failModacks,
				"DelayModacks": x.delayModacks,
			})
		})
	})
}

// modackRequest is one ModifyAckDeadline call as the client made it.
type modackRequest struct {
	at      time.Time
	seconds int32
	ids     []string
	size    int
	err     error
}

// recorder records every ModifyAckDeadline request.
type recorder struct {
	pubsubpb.SubscriberClient
	mu   sync.Mutex
	reqs []modackRequest
}

func (r *recorder) ModifyAckDeadline(ctx context.Context, in *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	at := time.Now()
	out, err := r.SubscriberClient.ModifyAckDeadline(ctx, in, opts...)
	r.mu.Lock()
	r.reqs = append(r.reqs, modackRequest{at: at, seconds: in.GetAckDeadlineSeconds(), ids: in.GetAckIds(), size: proto.Size(in), err: err})
	r.mu.Unlock()
	return out, err
}

type extenderModel struct {
	srv          *pubsubtest.Server
	raw          pubsubpb.SubscriberClient
	rec          *recorder
	ext          *flow.Extender
	track        *flow.Tracker
	topic, sub   string
	deadline     time.Duration // the subscription's (Pull's) ack deadline
	maxExtension time.Duration
	interval     time.Duration // the tick interval
	lastFault    map[string]time.Time
	checked      int // requests already checked

	mu       sync.Mutex
	held     map[*source.Message]bool
	expired  map[*source.Message]time.Time // settled as Expired by the extender, when
	received map[*source.Message]time.Time
}

// Settle is the pulled messages' settle path (message.Path): it records
// what the extender expired; the server no longer counts a message once
// the model's own RPC for it returned, which it has by the time the
// message settles (Done at once).
func (x *extenderModel) Settle(mi any, o uint32, _ time.Duration) {
	m := mi.(*source.Message)
	if o == message.Expired {
		x.mu.Lock()
		x.expired[m] = time.Now()
		delete(x.held, m)
		x.mu.Unlock()
	}
	message.Of(m).Done(m)
}

func newExtenderModel(t *rapid.T) *extenderModel {
	deadline := rapid.SampledFrom([]time.Duration{10 * time.Second, 20 * time.Second, 60 * time.Second}).Draw(t, "deadline")
	maxExtension := rapid.SampledFrom([]time.Duration{time.Minute, 3 * time.Minute, 60 * time.Minute}).Draw(t, "maxExtension")
	return newExtenderModelWith(t, deadline, maxExtension)
}

func newExtenderModelWith(t *rapid.T, deadline, maxExtension time.Duration) *extenderModel {
	srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
	if err != nil {
		t.Fatal(err)
	}
	x := &extenderModel{
		srv:       srv,
		raw:       pubsubpb.NewSubscriberClient(srv.ClientConn()),
		lastFault: map[string]time.Time{},
		held:      map[*source.Message]bool{},
		expired:   map[*source.Message]time.Time{},
		received:  map[*source.Message]time.Time{},
	}
	x.rec = &recorder{SubscriberClient: x.raw}
	x.deadline, x.maxExtension = deadline, maxExtension
	ctx := context.Background()
	if x.topic, err = srv.CreateTopic(ctx, "topic"); err != nil {
		t.Fatal(err)
	}
	if x.sub, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: x.topic, AckDeadline: x.deadline}); err != nil {
		t.Fatal(err)
	}
	cfg := flow.ExtenderConfig{StreamAckDeadline: x.deadline, MaxExtension: x.maxExtension}
	x.interval = x.deadline / 4
	// A fixed strategy keeps the tick interval, and with it the bound on
	// how late a lease past max extension is dropped, known; the adaptive
	// strategy is covered by the machine and the flow package's own tests.
	cfg.Strategy = flow.Fixed(x.interval, x.deadline)
	if x.ext, err = flow.NewExtender(x.rec, cfg); err != nil {
		t.Fatal(err)
	}
	x.track = flow.EagerTrack(x.ext, 0)
	return x
}

func (x *extenderModel) teardown() {
	_ = x.ext.Close()
	_ = x.srv.Close()
}

func (x *extenderModel) pull(t *rapid.T) {
	n := rapid.IntRange(1, 40).Draw(t, "n")
	if rapid.IntRange(0, 9).Draw(t, "big") == 0 {
		n = rapid.IntRange(900, 2500).Draw(t, "bigN")
	}
	x.doPull(t, n)
}

func (x *extenderModel) doPull(t *rapid.T, n int) {
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
	}
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		if _, err := x.srv.Publish(ctx, x.topic, msgs[start:min(n, start+1000)]...); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < n; {
		resp, err := x.raw.Pull(ctx, &pubsubpb.PullRequest{Subscription: x.sub, MaxMessages: int32(min(n-got, 1000))})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetReceivedMessages()) == 0 {
			break // the rest is out already (redeliveries come back later)
		}
		now := time.Now()
		var batch []*source.Message
		for _, rm := range resp.GetReceivedMessages() {
			m := &source.Message{
				ID:           rm.GetMessage().GetMessageId(),
				AckID:        rm.GetAckId(),
				Data:         rm.GetMessage().GetData(),
				ReceiveTime:  now,
				Subscription: x.sub,
			}
			st := message.Of(m)
			st.Size, st.Path = proto.Size(rm), x
			x.mu.Lock()
			x.held[m] = true
			x.received[m] = now
			x.mu.Unlock()
			batch = append(batch, m)
			got++
		}
		x.track.Receipt(message.Key{}).Receive(0, batch) // a response's worth, on receipt
	}
	x.settle()
}

// pick draws up to n held messages.
func (x *extenderModel) pick(t *rapid.T) []*source.Message {
	x.mu.Lock()
	var held []*source.Message
	for m := range x.held {
		held = append(held, m)
	}
	x.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	slices.SortFunc(held, func(a, b *source.Message) int {
		switch {
		case a.AckID < b.AckID:
			return -1
		case a.AckID > b.AckID:
			return 1
		}
		return 0
	})
	n := rapid.IntRange(1, len(held)).Draw(t, "count")
	start := rapid.IntRange(0, len(held)-n).Draw(t, "from")
	return held[start : start+n]
}

// ack acks some held messages: the RPC first, then the outcome (an acked
// message keeps its lease until it is Done, which the settle path does at
// once: the RPC has returned).
func (x *extenderModel) ack(t *rapid.T) {
	ms := x.pick(t)
	if len(ms) == 0 {
		return
	}
	for _, chunk := range chunks(ackIDs(ms)) {
		if _, err := x.raw.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: x.sub, AckIds: chunk}); err != nil {
			t.Fatal(err)
		}
	}
	x.release(ms, (*source.Message).Ack)
}

// nack settles some held messages with a nack, then sends it: the lease
// ends first, so no extension can undo the nack.
func (x *extenderModel) nack(t *rapid.T) {
	ms := x.pick(t)
	if len(ms) == 0 {
		return
	}
	x.release(ms, (*source.Message).Nack)
	for _, chunk := range chunks(ackIDs(ms)) {
		// Injected faults hit the test's nacks too: retry them.
		var err error
		for range 5 {
			if _, err = x.raw.ModifyAckDeadline(context.Background(), &pubsubpb.ModifyAckDeadlineRequest{Subscription: x.sub, AckIds: chunk}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	x.settle()
}

func ackIDs(ms []*source.Message) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.AckID
	}
	return ids
}

func (x *extenderModel) release(ms []*source.Message, settle func(*source.Message) bool) {
	for _, m := range ms {
		settle(m)
		x.mu.Lock()
		delete(x.held, m)
		x.mu.Unlock()
	}
	x.settle()
}

func (x *extenderModel) advance(t *rapid.T) {
	x.doAdvance(time.Duration(rapid.IntRange(1, 30000).Draw(t, "ms")) * time.Millisecond)
}

func (x *extenderModel) doAdvance(d time.Duration) {
	time.Sleep(d)
	x.settle()
}

// Faults stay within the margin, as in the machine (see faultCooldown).
func (x *extenderModel) inject(f func()) {
	if last, ok := x.lastFault["ModifyAckDeadline"]; ok && time.Since(last) < faultCooldown {
		return
	}
	x.lastFault["ModifyAckDeadline"] = time.Now()
	f()
	x.settle()
}

func (x *extenderModel) failModacks(t *rapid.T) {
	n := rapid.IntRange(1, 2).Draw(t, "n")
	x.inject(func() { x.srv.FailNext("ModifyAckDeadline", n, codes.Unavailable) })
}

func (x *extenderModel) delayModacks(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{0, 100 * time.Millisecond, time.Second}).Draw(t, "latency")
	x.inject(func() { x.srv.SetLatency("ModifyAckDeadline", d) })
}

// settle lets the extender's receipt flush (2 ms) and workers run.
func (x *extenderModel) settle() {
	time.Sleep(10 * time.Millisecond)
}

func (x *extenderModel) check(t *rapid.T) {
	x.settle()
	ss := x.srv.SubscriptionStats(x.sub)
	x.mu.Lock()
	held, expired := len(x.held), len(x.expired)
	now := time.Now()
	// The tick interval is a quarter of the deadline in force.
	interval := max(x.interval, x.ext.Stats().Deadline/4)
	for m := range x.held {
		// Dropped at the first tick past the limit; ticks are jittered
		// ±10 % and a slow RPC may hold the loop up to a second more.
		if age := now.Sub(x.received[m]); age > x.maxExtension+interval*11/10+2*time.Second {
			x.mu.Unlock()
			t.Fatalf("a lease held %v, past the maximum extension %v", age, x.maxExtension)
		}
	}
	for m, at := range x.expired {
		if age := at.Sub(x.received[m]); age < x.maxExtension {
			x.mu.Unlock()
			t.Fatalf("invariant 1: a lease dropped after %v, before the maximum extension %v: its deadline lapsed", age, x.maxExtension)
		}
	}
	x.mu.Unlock()
	// The server redelivers what the extender dropped: those may expire.
	if ss.Expired > int64(expired) {
		t.Fatalf("invariant 1: %d leases lapsed at the server, %d dropped past max extension (holding %d)", ss.Expired, expired, held)
	}
	if got := x.ext.Stats().Leases; got != held {
		t.Fatalf("the extender holds %d leases, the model %d", got, held)
	}
	x.checkRequests(t)
}

// checkRequests checks the requests made since the last check: limits,
// and that what was due together went out together.
func (x *extenderModel) checkRequests(t *rapid.T) {
	x.rec.mu.Lock()
	reqs := x.rec.reqs[x.checked:]
	failed := map[string]bool{}
	for _, r := range x.rec.reqs[:x.checked] {
		if r.err != nil {
			for _, id := range r.ids {
				failed[id] = true
			}
		}
	}
	x.checked = len(x.rec.reqs)
	x.rec.mu.Unlock()
	type group struct {
		at      time.Time
		seconds int32
	}
	ids := map[group]int{}
	count := map[group]int{}
	for _, r := range reqs {
		if len(r.ids) > ackids.MaxIDs || r.size > limits.MaxAckRequestBytes {
			t.Fatalf("a ModifyAckDeadline request with %d ack ids, %d bytes", len(r.ids), r.size)
		}
		if r.seconds < 1 || r.seconds > 600 {
			t.Fatalf("an extension of %d s", r.seconds)
		}
		retry := len(r.ids) > 0 && failed[r.ids[0]]
		for _, id := range r.ids {
			if r.err != nil {
				failed[id] = true
			}
		}
		if retry {
			continue
		}
		g := group{r.at, r.seconds}
		ids[g] += len(r.ids)
		count[g]++
	}
	for g, n := range count {
		// A receipt flush and a tick may fall on the same instant.
		if want := (ids[g]+ackids.MaxIDs-1)/ackids.MaxIDs + 1; n > want {
			t.Fatalf("batching: %d requests for %d ack ids due at %s with %d s (want at most %d)", n, ids[g], g.at.Format("04:05.000"), g.seconds, want)
		}
	}
}

// chunks splits ack ids at the API's 1000-id limit (the test's own acks).
func chunks(ids []string) [][]string {
	var out [][]string
	for len(ids) > ackids.MaxIDs {
		out = append(out, ids[:ackids.MaxIDs])
		ids = ids[ackids.MaxIDs:]
	}
	return append(out, ids)
}
