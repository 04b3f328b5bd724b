package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, ""},
		{Policy{OnSuccess: source.NoOp, OnFailure: source.NackAfter, NackDelay: 5 * time.Second}, ""},
		{Policy{OnSuccess: source.Expired}, "OnSuccess"},
		{Policy{OnFailure: source.Outcome(99)}, "OnFailure"},
		{Policy{NackDelay: -time.Second}, "NackDelay"},
		{Policy{NackDelay: time.Hour}, "NackDelay"},
	} {
		err := tc.p.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want mention of %q", tc.p, err, tc.want)
		}
	}
}

func TestApply(t *testing.T) {
	fail := errors.New("handler failed")
	for _, tc := range []struct {
		p     Policy
		err   error
		want  source.Outcome
		delay time.Duration
	}{
		{Policy{}, nil, source.Ack, 0},
		{Policy{}, fail, source.Nack, 0},
		{Policy{OnFailure: source.NackAfter, NackDelay: 5 * time.Second}, fail, source.NackAfter, 5 * time.Second},
		{Policy{OnSuccess: source.NoOp}, nil, source.NoOp, 0},
	} {
		m := newMsg("x", 1)
		p := &pathRec{}
		message.Of(m).Path = p
		if !Apply(m, tc.err, tc.p) || m.Outcome() != tc.want || tc.want == source.NackAfter && p.delay != tc.delay {
			t.Errorf("Apply(%v, %+v): outcome %v delay %v, want %v %v", tc.err, tc.p, m.Outcome(), p.delay, tc.want, tc.delay)
		}
		if Apply(m, nil, Policy{}) {
			t.Error("Apply overrode an earlier outcome")
		}
	}
}

// pathRec is a settle path that records the delay it was given.
type pathRec struct{ delay time.Duration }

func (p *pathRec) Settle(m any, _ uint32, d time.Duration) {
	p.delay = d
	message.Of(m).Done(m)
}

// newMsg is a hand-made message of size bytes, settled locally.
func newMsg(ackID string, size int) *source.Message {
	m := &source.Message{AckID: ackID}
	message.Of(m).Size = size
	return m
}
