// Package bench measures pubsubflow's Subscriber side by side with Google's
// official Go client (cloud.google.com/go/pubsub/v2) and with a raw
// StreamingPull loop, all against a pubsubtest server (in a child process
// for the throughput and memory benchmarks, so only the client is
// measured); its Publisher against Google's publisher and a raw batched
// Publish loop (BenchmarkPublish, BenchmarkPublishClient,
// BenchmarkPublishTraced); and
// holds the helpers those benchmarks share (Meter: wall time, process CPU
// time and peak heap of a run).
//
// The benchmarks live in this package's tests; BENCHMARKS.md at the
// repository root has the commands, the machine and the measured tables:
//
//	go test -run '^$' -bench 'Throughput$' -benchtime 100000x -count 6 ./bench/
//	go test -run '^$' -bench 'ThroughputTraced' -benchtime 100000x ./bench/
//	go test -run '^$' -bench 'AckLatency/rate=low' -benchtime 100x ./bench/
//	go test -run '^$' -bench 'AckLatency/rate=full' -benchtime 100000x ./bench/
//	go test -run '^$' -bench SlowConsumer -benchtime 1x ./bench/
//	go test -run '^$' -bench MemoryBacklog -benchtime 1000000x -timeout 30m ./bench/
//	go test -run '^$' -bench 'Publish$' -benchtime 200000x -count 1 ./bench/
//	go test -run '^$' -bench 'PublishClient' -benchtime 200000x -count 1 ./bench/
//	go test -run '^$' -bench 'PublishTraced' -benchtime 100000x -count 1 ./bench/
//
// The slow-consumer benchmark also runs the demand-driven tracker of
// examples/naive, which leases a message only when a handler pulls it, to
// show that the scenario makes such a shape redeliver.
//
// go test ./bench/ without -bench runs only quick tests (the slow-consumer
// scenario in virtual time, and the helpers).
package bench
