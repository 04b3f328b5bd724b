package ack

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// idTag records the fate of one ack id.
type idTag struct {
	id   string
	mu   *sync.Mutex
	done map[string]int
}

func (t idTag) AckDone(err error) {
	if err != nil {
		return
	}
	t.mu.Lock()
	t.done[t.id]++
	t.mu.Unlock()
}

// TestModackTagsAdoptsOnlyWhatItIsGiven: an empty batch adopts a caller's
// slices, but a later add must not write past their end — there the
// caller's array may hold its next chunk, still to be queued. Every id is
// sent once and every tag hears its own id's fate once.
func TestModackTagsAdoptsOnlyWhatItIsGiven(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := &stubClient{reply: func(ctx context.Context, _ call) error {
		once.Do(func() { close(inFlight); <-release }) // hold the first RPC
		return nil
	}}
	a := newAck(t, c, Config{})
	a.Modacks([]string{"first"}, 30)
	<-inFlight // what follows waits behind it, in one batch

	var mu sync.Mutex
	done := map[string]int{}
	tagsOf := func(ids []string) []Tag {
		tags := make([]Tag, len(ids))
		for i, id := range ids {
			tags[i] = idTag{id: id, mu: &mu, done: done}
		}
		return tags
	}
	arr := []string{"a0", "a1", "b0", "b1"} // two chunks of one array
	tags := tagsOf(arr)
	a.ModackTags(arr[:2], 30, false, tags[:2]) // adopted: the batch is empty
	a.ModackTags([]string{"x0", "x1"}, 30, false, tagsOf([]string{"x0", "x1"}))
	if !slices.Equal(arr[2:], []string{"b0", "b1"}) || tags[2].(idTag).id != "b0" || tags[3].(idTag).id != "b1" {
		t.Fatalf("the caller's next chunk was overwritten: %v", arr)
	}
	a.ModackTags(arr[2:], 30, false, tags[2:])
	close(release)
	if err := a.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	closeAck(t, a)

	var sent []string
	for _, c := range c.snapshot() {
		sent = append(sent, c.ids...)
	}
	slices.Sort(sent)
	if want := []string{"a0", "a1", "b0", "b1", "first", "x0", "x1"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want each of %v once", sent, want)
	}
	for _, id := range []string{"a0", "a1", "b0", "b1", "x0", "x1"} {
		if done[id] != 1 {
			t.Errorf("tag of %s heard %d confirmations, want 1", id, done[id])
		}
	}
}
