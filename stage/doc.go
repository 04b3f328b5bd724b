// Package stage holds the building blocks every pubsubflow stage is made of:
// a Group that owns the goroutines of one running pipeline (context, first
// error, wait), the Source/Flow/Sink interfaces stages implement (with their
// Func adapters, and Fuser) and their Batch variants (a pipeline hands
// whole batches between two stages that take them), Eager, the bounded
// eager-pull stage, Ring, the module's one FIFO queue, and the helpers
// Send and Recv (channel operations that give up when the context is
// done), Unbatch, and Safe (a panic turned into a *PanicError).
//
// Eager is the answer to one bug shape: a one-in-one-out step that does its
// bookkeeping only when downstream asks for the next element. Eager receives
// whenever its buffer has room, runs its on-receipt hook at once, and emits on
// downstream demand; with a full buffer it stops receiving, and that
// backpressure reaches whatever feeds it. The package knows nothing of
// Pub/Sub.
package stage
