package publisher

import "context"

// Result is the pending outcome of one Publish: the server-assigned
// message id, or the error that ended its publish. It settles
// once; it is safe for concurrent use.
type Result struct {
	done <-chan struct{}
	b    *batch // the message's batch; nil when err was set at Publish
	i    int    // the message's index in b
	err  error
}

// closedChan is the Ready channel of results that fail before batching.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func failed(err error) *Result { return &Result{done: closedChan, err: err} }

// Ready is closed when the result has settled.
func (r *Result) Ready() <-chan struct{} { return r.done }

// Get waits until the result settles or ctx is done and returns the
// message id, or the publish error. A ctx error does not cancel the
// publish.
func (r *Result) Get(ctx context.Context) (id string, err error) {
	select {
	case <-r.done:
	default:
		select {
		case <-r.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if r.err != nil {
		return "", r.err
	}
	if r.b.err != nil {
		return "", r.b.err
	}
	if r.b.msgErrs != nil && r.b.msgErrs[r.i] != nil {
		return "", r.b.msgErrs[r.i]
	}
	return r.b.ids[r.i], nil
}
