package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/publisher"
)

// Bounds of the publish command.
const (
	// maxLine is the longest stdin line accepted: the service's message
	// data limit (a line is one message's data).
	maxLine = limits.MaxDataBytes
	// publishWindow bounds the results waiting to be printed in order.
	publishWindow = 1000
)

func publishCommand() *cobra.Command {
	o := publishOptions{attrs: map[string]string{}}
	c := newCommand("publish [flags] TOPIC", "publish each stdin line as a message; print the ids", `
Publishes each line of standard input (without its newline) as one message
to TOPIC (projects/P/topics/T, or T with --project) and prints each message
id on its own line, in input order. Empty lines are skipped unless the
messages carry attributes. Lines may be up to 10,000,000 bytes (the
service's message limit); a longer line stops the command with exit code
1 after the lines before it. --attr and --ordering-key are checked
against the service's limits before anything is read. A line that fails
to publish is reported on stderr, and the exit code is 1. Ctrl-C stops it
with exit code 130 after the lines already read are published.

`+limitsHelp(), nArgs(1, "TOPIC"), func(ctx context.Context, env cliEnv, args []string) error {
		if v := limits.CheckMessage([]byte("x"), o.attrs, o.orderingKey); v != nil {
			return usagef("%s: %s: %s", flagOf(v.Field), v.Limit, v.Detail)
		}
		return runPublish(ctx, env, args[0], o)
	})
	fs := c.Flags()
	o.ep.register(fs)
	fs.Func("attr", "attribute KEY=VALUE on every message (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want KEY=VALUE", s)
		}
		o.attrs[k] = v
		return nil
	})
	fs.StringVar(&o.orderingKey, "ordering-key", "", "ordering key of every message (enables ordered publishing)")
	c.ValidArgsFunction = topicResource.complete(&o.ep, true)
	return c
}

type publishOptions struct {
	ep          endpointFlags
	attrs       map[string]string
	orderingKey string
}

func runPublish(ctx context.Context, env cliEnv, name string, o publishOptions) error {
	conn, topic, err := o.ep.open(ctx, "topics", name)
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := publisher.New(conn, topic, publisher.Config{EnableOrdering: o.orderingKey != ""})
	if err != nil {
		return err
	}
	attrs := o.attrs
	if len(attrs) == 0 {
		attrs = nil
	}

	type pending struct {
		line int
		r    *publisher.Result
	}
	results := make(chan pending, publishWindow)
	var (
		wg     sync.WaitGroup
		failed int
	)
	wg.Go(func() { // prints ids in input order
		for p := range results {
			id, err := p.r.Get(ctx)
			if err != nil {
				failed++
				fmt.Fprintf(env.stderr, "pubsubflow publish: line %d: %v\n", p.line, err)
				continue
			}
			fmt.Fprintln(env.stdout, id)
		}
	})

	sc := bufio.NewScanner(env.stdin)
	sc.Buffer(make([]byte, 64<<10), maxLine+1) // +1: the newline
	var readErr error
	n := 0
	for n = 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 && attrs == nil {
			continue // Pub/Sub refuses a message with neither data nor attributes
		}
		data := append([]byte(nil), sc.Bytes()...)
		r := pub.Publish(ctx, &publisher.Message{Data: data, Attributes: attrs, OrderingKey: o.orderingKey})
		select {
		case results <- pending{line: n, r: r}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			readErr = ctx.Err()
			break
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		readErr = fmt.Errorf("line %d is longer than %d bytes, the service's limit for a message's data", n, maxLine)
	} else if err != nil {
		readErr = fmt.Errorf("reading stdin: %w", err)
	}
	close(results)
	closeErr := pub.Close()
	wg.Wait()
	if failed > 0 {
		return errors.Join(readErr, fmt.Errorf("%d messages failed to publish", failed))
	}
	return errors.Join(readErr, closeErr)
}

// flagOf names the flag that set a message field.
func flagOf(field string) string {
	if field == "OrderingKey" {
		return "--ordering-key"
	}
	return "--attr " + strings.TrimPrefix(field, "Attributes")
}
