package flow

import (
	"reflect"
	"slices"
	"testing"
)

// The operators export what a user wires and reads, and no plumbing: the
// hooks a source runs on receipt (counting, the streams' budget, leases,
// the keyed hand-off) are reachable only through Receipt, whose argument
// only this module can make, so a user cannot call them out of turn
// (taking a lane that is never given back, say).
func TestOperatorsExportNoPlumbing(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want []string
	}{
		{&Gate{}, []string{"Receipt", "Run"}},
		{&KeyedGate{}, []string{"Receipt", "Run"}},
		{&Tracker{}, []string{"Receipt", "Run"}},
		{&FlowControl{}, []string{"MaxBytes", "MaxMessages", "Outstanding", "OutstandingBytes", "Room", "Stats", "Wake"}},
	} {
		typ := reflect.TypeOf(tc.v)
		var got []string
		for m := range typ.Methods() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v exports methods %v, want only %v", typ, got, tc.want)
		}
	}
}
