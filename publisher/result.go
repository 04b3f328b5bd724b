package publisher

import "context"

// Result is the pending outcome of one Publish: the server-assigned
// message id, or the error that ended its publish. It settles
// once; it is safe for concurrent use.
type Result struct {
	o *outcome // the message's batch's (or its own, when it failed at Publish)
	i int      // the message's index in the batch
}

// outcome is what the Results of a batch read once done is closed.
type outcome struct {
	done    chan struct{}
	ids     []string
	err     error
	msgErrs []error // per message, when single messages failed (then err is nil)
}

// closedChan is the Ready channel of results that fail before batching.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func failed(err error) *Result { return &Result{o: &outcome{done: closedChan, err: err}} }

// refused returns the error of a Result that failed at Publish, before
// it was batched (nil for a batched one, whatever becomes of it).
func (r *Result) refused() error {
	if r.o.done == closedChan {
		return r.o.err
	}
	return nil
}

// Ready is closed when the result has settled.
func (r *Result) Ready() <-chan struct{} { return r.o.done }

// Get waits until the result settles or ctx is done and returns the
// message id, or the publish error. A ctx error does not cancel the
// publish.
func (r *Result) Get(ctx context.Context) (id string, err error) {
	o := r.o
	select {
	case <-o.done:
	default:
		select {
		case <-o.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if o.err != nil {
		return "", o.err
	}
	if o.msgErrs != nil && o.msgErrs[r.i] != nil {
		return "", o.msgErrs[r.i]
	}
	return o.ids[r.i], nil
}
