// Package operators holds generic stages that know nothing of Pub/Sub:
// ParallelMap in unordered, ordered and keyed modes, and Batch, which
// groups elements into batches by size, bytes, wait, key and upstream's
// "no more for now", with an ordered mode that holds a key's next batch
// until the previous one is released. Every operator runs a fixed number
// of goroutines, never one per element, and does every send and receive
// in a select on its group's context.
package operators
