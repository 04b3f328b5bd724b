package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
// RPCs that read and delete it: get, list and delete are the same three
// steps for every kind (check the arguments, connect, one call), written
// once here.
type resource[M apiResource] struct {
	kind string // the collection in names: "topics", "subscriptions", …
	noun string // "topic"
	arg  string // the name's placeholder in the usage: "TOPIC"
	get  func(ctx context.Context, a *adminClient, name string) (M, error)
	list func(ctx context.Context, a *adminClient, project, token string) ([]M, string, error)
	del  func(ctx context.Context, a *adminClient, name string) error

	print func(a *adminClient, m M) error
	table func(w io.Writer, project string, ms []M) error
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

// adminCommand is a verb of a resource group; run gets the positional
// arguments, args checked.
func adminCommand(o *adminOptions, use, short, long string, args cobra.PositionalArgs, run func(ctx context.Context, env cliEnv, args []string) error) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: strings.TrimSpace(long + adminUsageTail), Args: args, RunE: runs(run)}
	c.Flags().BoolVar(&o.json, "json", false, "print JSON (the API's field names) instead of a table")
	return c
}

// connected runs body on a fresh connection and closes it after.
func (o *adminOptions) connected(ctx context.Context, env cliEnv, body func(a *adminClient) error) error {
	a, err := o.connect(ctx, env)
	if err != nil {
		return err
	}
	defer a.Close()
	return body(a)
}

// getCommand is "KIND get NAME": it prints the resource.
func getCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	c := adminCommand(o, "get [flags] "+r.arg, short, long, nArgs(1, r.arg), func(ctx context.Context, env cliEnv, args []string) error {
		name, err := o.ep.resolve(r.kind, args[0])
		if err != nil {
			return err
		}
		return o.connected(ctx, env, func(a *adminClient) error {
			m, err := adminCall(ctx, a, func(ctx context.Context) (M, error) { return r.get(ctx, a, name) })
			if err != nil {
				return a.failed("getting "+r.noun+" "+name, r.noun+" "+name, err)
			}
			return r.print(a, m)
		})
	})
	c.ValidArgsFunction = r.complete(&o.ep, true)
	return c
}

// listCommand is "KIND list": every page of the project's resources, as a
// table or as JSON.
func listCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	return adminCommand(o, "list [flags]", short, long, nArgs(0, "no arguments"), func(ctx context.Context, env cliEnv, _ []string) error {
		project, err := o.project()
		if err != nil {
			return err
		}
		return o.connected(ctx, env, func(a *adminClient) error {
			ms, err := listAll(ctx, a, "listing the "+r.kind+" of "+project, func(ctx context.Context, token string) ([]M, string, error) {
				return r.list(ctx, a, project, token)
			})
			if err != nil {
				return err
			}
			if a.json {
				return printJSONList(a.out, ms)
			}
			return r.table(a.out, project, ms)
		})
	})
}

// deleteCommand is "KIND delete NAME": it deletes the resource and says so.
func deleteCommand[M apiResource](o *adminOptions, r resource[M], short, long string) *cobra.Command {
	c := adminCommand(o, "delete [flags] "+r.arg, short, long, nArgs(1, r.arg), func(ctx context.Context, env cliEnv, args []string) error {
		name, err := o.ep.resolve(r.kind, args[0])
		if err != nil {
			return err
		}
		return o.connected(ctx, env, func(a *adminClient) error {
			if err := a.call(ctx, func(ctx context.Context) error { return r.del(ctx, a, name) }); err != nil {
				return a.failed("deleting "+r.noun+" "+name, r.noun+" "+name, err)
			}
			return a.printDeleted(r.noun, name)
		})
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
		o := &adminOptions{ep: *ep}
		_ = o.connected(ctx, cliEnv{stdout: io.Discard}, func(a *adminClient) error {
			ms, err := listAll(ctx, a, "", func(ctx context.Context, token string) ([]M, string, error) {
				return r.list(ctx, a, "projects/"+project, token)
			})
			for _, m := range ms {
				name := m.GetName()
				if !full {
					name = shortName(name, "projects/"+project)
				}
				if strings.HasPrefix(name, typed) {
					names = append(names, name)
				}
			}
			return err
		})
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeFlag makes c's flag name complete with f.
func completeFlag(c *cobra.Command, name string, f cobra.CompletionFunc) {
	if err := c.RegisterFlagCompletionFunc(name, f); err != nil {
		panic(err) // no such flag: a mistake in the command's definition
	}
}
