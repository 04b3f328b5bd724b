package stage

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Group owns the goroutines of one running pipeline. It is errgroup-like:
// the first error cancels the group's context and is what Wait returns; Wait
// returns only after every goroutine started with Go has returned.
//
// Errors that are only the echo of the group's own cancellation
// (context.Canceled after the group was cancelled) are not recorded, so a
// teardown never masks the error that caused it.
type Group struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	err   error
	hooks []func()
	done  bool
}

// NewGroup returns a Group whose context is derived from parent.
func NewGroup(parent context.Context) *Group {
	ctx, cancel := context.WithCancel(parent)
	return &Group{parent: parent, ctx: ctx, cancel: cancel}
}

// Context is cancelled when any goroutine fails, when Cancel is called, or
// when the parent context is done. Stages select on it for every send and
// receive.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs f in a goroutine owned by the group. A non-nil error from f is
// recorded (the first one wins) and cancels the group.
//
// A panic in f does not crash the program: it fails the group with a
// *PanicError, so the pipeline ends cleanly and its stages settle what
// they hold.
func (g *Group) Go(f func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := Safe(func() error { return f(g.ctx) }); err != nil {
			g.Fail(err)
		}
	}()
}

// PanicError is the error of a stage, element function or handler that
// panicked: Value is what was passed to panic, Stack the panicking
// goroutine's stack. A pipeline whose stage panics ends with it (the
// group is failed and cancelled); a ParallelMap function's or a
// Subscriber handler's panic is that element's error (the message is
// nacked and the pipeline goes on).
type PanicError struct {
	Value any
	Stack []byte
}

// Error names the value passed to panic.
func (e *PanicError) Error() string { return fmt.Sprintf("pubsubflow: panicked: %v", e.Value) }

// Safe calls f, turning a panic into a *PanicError.
func Safe(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return f()
}

// Fail records err as the group's error if it is the first, and cancels the
// group. Cancellation echoes are ignored once the group is cancelled.
func (g *Group) Fail(err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	echo := g.ctx.Err() != nil && errors.Is(err, context.Canceled)
	if g.err == nil && !echo {
		g.err = err
	}
	g.mu.Unlock()
	g.cancel()
}

// Cancel stops every goroutine of the group without recording an error.
func (g *Group) Cancel() { g.cancel() }

// Err returns the first recorded error so far, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Wait blocks until every goroutine has returned and then returns the first
// error. When no goroutine failed but the parent context was cancelled, it
// returns the parent's error, so a cancelled pipeline is never mistaken for a
// completed one.
//
// Once every goroutine has returned, Wait runs the OnDone hooks (the first
// Wait only), last registered first, as defer does.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel()
	g.mu.Lock()
	hooks := g.hooks
	g.hooks, g.done = nil, true
	g.mu.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
	if err := g.Err(); err != nil {
		return err
	}
	return g.parent.Err()
}

// OnDone registers f to run once the group is over: in Wait, after every
// goroutine of the group has returned. A stage uses it to clean up after
// the whole pipeline (a source settles what its pipeline left unsettled).
// Hooks run in reverse order, so what was set up first (a Subscriber's
// count of its runs) ends after what was built on it (that settle).
// Registered after that, f runs at once.
func (g *Group) OnDone(f func()) {
	g.mu.Lock()
	if !g.done {
		g.hooks = append(g.hooks, f)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	f()
}
