// Package operators holds generic stages that know nothing of Pub/Sub:
// ParallelMap in unordered, ordered and keyed modes. Every operator runs a
// fixed number of goroutines, never one per element, and does every send and
// receive in a select on its group's context.
package operators
