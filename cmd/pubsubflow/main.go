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
// 130 interrupted; a second SIGINT or SIGTERM ends the process at once.
// Every command takes --help; the commands are github.com/spf13/cobra's
// (cli.go).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(mainExit()) }

// mainExit runs the CLI on the process's arguments and streams. The first
// SIGINT or SIGTERM cancels the command's context, and every command stops
// cleanly on that; the signals' default action is restored first, so a
// second one ends the process at once, even while a command drains.
func mainExit() int {
	// The library logs to slog.Default(); the CLI shows warnings and
	// errors on stderr, not each stream's connect (Info).
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			signal.Stop(sigs)
			cancel()
		case <-ctx.Done():
		}
	}()
	return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}
