// Command pubsubflow is the pubsubflow CLI: a demo of the subscriber on an
// embedded Pub/Sub server, a standalone emulator, tail and publish for
// real subscriptions and topics, and a load bench that can run, side by side
// with ours, a subscriber that leases a message only when a worker asks for
// it, to show the server redelivering what waited unleased.
//
//	go install github.com/pubsubflow/pubsubflow/cmd/pubsubflow@latest
//
//	pubsubflow demo                           # no flags, no credentials
//	pubsubflow emulator --addr 127.0.0.1:8085 # for any language's client
//	pubsubflow tail projects/P/subscriptions/S --max 10
//	echo hello | pubsubflow publish projects/P/topics/T
//	pubsubflow bench --compare-naive --plot bench.svg
//	pubsubflow topics create T; pubsubflow subscriptions create S --topic T
//	pubsubflow subscriptions seek S --time -1h; pubsubflow snapshots list
//	source <(pubsubflow completion bash)      # or zsh, fish, powershell
//
// tail, publish and the topics, subscriptions and snapshots commands
// connect to PUBSUB_EMULATOR_HOST when it is set, and otherwise to Pub/Sub
// with Application Default Credentials; completing a resource name asks
// the same server. Exit codes: 0 success, 1 runtime failure, 2 bad usage,
// 130 interrupted. Every command takes --help; the commands are
// github.com/spf13/cobra's (cli.go).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(mainExit()) }

// mainExit runs the CLI on the process's arguments and streams; SIGINT and
// SIGTERM cancel the command's context, and every command stops cleanly on
// that.
func mainExit() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}
