package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// completionTimeout bounds what completing a name may take (connecting
// and listing): a shell waits for it.
const completionTimeout = 2 * time.Second

// apiResource is a topic, subscription or snapshot.
type apiResource interface {
	proto.Message
	GetName() string
}

// resource is one kind of resource the admin commands manage, with the
// RPCs that read and delete it and how it is printed: get, list and
// delete are the same three steps for every kind (check the arguments,
// connect, one call), written once here.
type resource[M apiResource] struct {
	kind string // the collection in names: "topics", "subscriptions", …
	noun string // "topic"
	arg  string // the name's placeholder in the usage: "TOPIC"
	get  func(ctx context.Context, a *adminClient, name string) (M, error)
	list func(ctx context.Context, a *adminClient, project, token string) ([]M, string, error)
	del  func(ctx context.Context, a *adminClient, name string) error

	fields func(t *table, m M)             // one resource's rows
	header []any                           // the columns of a list
	row    func(project string, m M) []any // one resource in a list
}

// adminGroup is "pubsubflow KIND": the verbs of one kind of resource,
// which share o, and its connection flags.
func adminGroup(o *adminOptions, use, short, long string, verbs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Long: strings.TrimSpace(long), GroupID: groupAdmin,
		Args: subcommandArgs, RunE: missingCommand}
	o.ep.register(g.PersistentFlags())
	g.AddCommand(verbs...)
	return g
}

// adminRun is what a verb does on a fresh connection.
type adminRun func(ctx context.Context, a *adminClient) error

// adminCommand is a verb of a resource group: prepare checks the
// positional arguments (args checked their number) and the flags before
// anything is sent, so that a bad one is a usage error, and returns what
// to do on a fresh connection.
func adminCommand(o *adminOptions, use, short, long string, args cobra.PositionalArgs, prepare func(args []string) (adminRun, error)) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: strings.TrimSpace(long + adminUsageTail), Args: args,
		RunE: runs(func(ctx context.Context, env cliEnv, args []string) error {
			run, err := prepare(args)
			if err != nil {
				return err
			}
			a, err := o.connect(ctx, env.stdout)
			if err != nil {
				return err
			}
			defer a.conn.Close()
			return run(ctx, a)
		})}
	c.Flags().BoolVar(&o.json, "json", false, "print JSON (the API's field names) instead of a table")
	return c
}

// nameCommand is a verb on one NAME of r's kind: prepare gets its full
// name.
func nameCommand[M apiResource](o *adminOptions, r resource[M], use, short, long string, prepare func(name string) (adminRun, error)) *cobra.Command {
	return adminCommand(o, use, short, long, nArgs(1, r.arg), func(args []string) (adminRun, error) {
		name, err := o.ep.resolve(r.kind, args[0])
		if err != nil {
			return nil, err
		}
		return prepare(name)
	})
}

// show prints one resource: a table of its fields, or with --json the
// API's JSON.
func (r resource[M]) show(a *adminClient, m M) error {
	if a.json {
		return a.printJSON(apiJSON{m})
	}
	var t table
	r.fields(&t, m)
	return t.write(a.out)
}

// created shows the resource a create answered, or explains its failure:
// ALREADY_EXISTS is about name, a NOT_FOUND about another resource it
// refers to (the topic or dead-letter topic of a subscription, the
// subscription of a snapshot), which the service's message names.
func (r resource[M]) created(a *adminClient, action, name string, m M, err error) error {
	switch {
	case err == nil:
		return r.show(a, m)
	case status.Code(err) == codes.AlreadyExists:
		return a.failed(action, r.noun+" "+name, err)
	}
	return a.failed(action, "", err)
}

// getCommand is "KIND get NAME": it prints the resource.
func getCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	c := nameCommand(o, r, "get [flags] "+r.arg, short, long, func(name string) (adminRun, error) {
		return func(ctx context.Context, a *adminClient) error {
			m, err := r.get(ctx, a, name)
			if err != nil {
				return a.failed("getting "+r.noun+" "+name, r.noun+" "+name, err)
			}
			return r.show(a, m)
		}, nil
	})
	c.ValidArgsFunction = r.complete(&o.ep, true)
	return c
}

// listCommand is "KIND list": every page of the project's resources, as a
// table or as JSON.
func listCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	return adminCommand(o, "list [flags]", short, long, nArgs(0, "no arguments"), func([]string) (adminRun, error) {
		project, err := o.project()
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, a *adminClient) error {
			ms, err := r.listAll(ctx, a, project)
			switch {
			case err != nil:
				return err
			case a.json:
				list := make([]apiJSON, len(ms))
				for i, m := range ms {
					list[i] = apiJSON{m}
				}
				return a.printJSON(list)
			case len(ms) == 0:
				_, err := fmt.Fprintf(a.out, "no %s in %s\n", r.kind, project)
				return err
			}
			var t table
			t.row(r.header...)
			for _, m := range ms {
				t.row(r.row(project, m)...)
			}
			return t.write(a.out)
		}, nil
	})
}

// deleteCommand is "KIND delete NAME": it deletes the resource and says so.
func deleteCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	c := nameCommand(o, r, "delete [flags] "+r.arg, short, long, func(name string) (adminRun, error) {
		return func(ctx context.Context, a *adminClient) error {
			if err := r.del(ctx, a, name); err != nil {
				return a.failed("deleting "+r.noun+" "+name, r.noun+" "+name, err)
			}
			if a.json {
				return a.printJSON(map[string]string{"deleted": name})
			}
			_, err := fmt.Fprintf(a.out, "deleted %s %s\n", r.noun, name)
			return err
		}, nil
	})
	c.ValidArgsFunction = r.complete(&o.ep, true)
	return c
}

// complete completes a name of r's kind (the first positional argument
// if positional, else a flag's value) from the server ep points at: the
// ids of the project of --project or the environment, or full names once
// "projects/P/" is typed. Completing waits at most completionTimeout and
// offers nothing on any error.
func (r resource[M]) complete(ep *endpointFlags, positional bool) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
		project, full := ep.projectID(), strings.HasPrefix(typed, "projects/")
		if full {
			project, _, _ = strings.Cut(strings.TrimPrefix(typed, "projects/"), "/")
		}
		var names []cobra.Completion
		if (positional && len(args) > 0) || project == "" || ep.validate() != nil {
			return names, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(c.Context(), completionTimeout)
		defer cancel()
		a, err := (&adminOptions{ep: *ep}).connect(ctx, io.Discard)
		if err != nil {
			return names, cobra.ShellCompDirectiveNoFileComp
		}
		defer a.conn.Close()
		ms, _ := r.listAll(ctx, a, "projects/"+project)
		for _, m := range ms {
			name := m.GetName()
			if !full {
				name = shortName(name, "projects/"+project)
			}
			if strings.HasPrefix(name, typed) {
				names = append(names, name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeFlag makes c's flag name complete with f.
func completeFlag(c *cobra.Command, name string, f cobra.CompletionFunc) {
	if err := c.RegisterFlagCompletionFunc(name, f); err != nil {
		panic(err) // no such flag: a mistake in the command's definition
	}
}
