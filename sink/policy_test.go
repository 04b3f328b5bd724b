package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, ""},
		{Policy{OnSuccess: message.NoOp, OnFailure: message.NackAfter, NackDelay: 5 * time.Second}, ""},
		{Policy{OnSuccess: message.Expired}, "OnSuccess"},
		{Policy{OnFailure: message.Outcome(99)}, "OnFailure"},
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
		want  message.Outcome
		delay time.Duration
	}{
		{Policy{}, nil, message.Ack, 0},
		{Policy{}, fail, message.Nack, 0},
		{Policy{OnFailure: message.NackAfter, NackDelay: 5 * time.Second}, fail, message.NackAfter, 5 * time.Second},
		{Policy{OnSuccess: message.NoOp}, nil, message.NoOp, 0},
	} {
		m := newMsg("x", 1)
		if !Apply(m, tc.err, tc.p) || m.Outcome() != tc.want || tc.want == message.NackAfter && message.Delay(m) != tc.delay {
			t.Errorf("Apply(%v, %+v): outcome %v delay %v, want %v %v", tc.err, tc.p, m.Outcome(), message.Delay(m), tc.want, tc.delay)
		}
		if Apply(m, nil, Policy{}) {
			t.Error("Apply overrode an earlier outcome")
		}
	}
}
