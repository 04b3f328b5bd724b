package main

import (
	"context"
	"flag"
	"io"

	"google.golang.org/protobuf/proto"
)

// resource is one kind of resource the admin commands manage, with the
// RPCs that read and delete it: get, list and delete are the same three
// steps for every kind (check the arguments, connect, one call), written
// once here.
type resource[M proto.Message] struct {
	kind string // the collection in names: "topics", "subscriptions", …
	noun string // "topic"
	arg  string // the name's placeholder in the usage: "TOPIC"
	get  func(ctx context.Context, a *adminClient, name string) (M, error)
	list func(ctx context.Context, a *adminClient, project, token string) ([]M, string, error)
	del  func(ctx context.Context, a *adminClient, name string) error

	print func(a *adminClient, m M) error
	table func(w io.Writer, project string, ms []M) error
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

// adminCommand is a command with the admin flags only; run gets them.
func adminCommand(name, summary, usage string, run func(ctx context.Context, o *adminOptions, env cliEnv, args []string) error) command {
	return command{
		name:    name,
		summary: summary,
		usage:   usage + adminUsageTail,
		flags: func(fs *flag.FlagSet) func(context.Context, cliEnv, []string) error {
			o := new(adminOptions)
			o.register(fs)
			return func(ctx context.Context, env cliEnv, args []string) error { return run(ctx, o, env, args) }
		},
	}
}

// getCommand is "KIND get NAME": it prints the resource.
func getCommand[M proto.Message](r resource[M], summary, usage string) command {
	return adminCommand(r.kind+" get", summary, usage, func(ctx context.Context, o *adminOptions, env cliEnv, args []string) error {
		name, err := o.one(args, r.kind, r.arg)
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
}

// listCommand is "KIND list": every page of the project's resources, as a
// table or as JSON.
func listCommand[M proto.Message](r resource[M], summary, usage string) command {
	return adminCommand(r.kind+" list", summary, usage, func(ctx context.Context, o *adminOptions, env cliEnv, args []string) error {
		if err := wantArgs(args, 0, "no arguments"); err != nil {
			return err
		}
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
func deleteCommand[M proto.Message](r resource[M], summary, usage string) command {
	return adminCommand(r.kind+" delete", summary, usage, func(ctx context.Context, o *adminOptions, env cliEnv, args []string) error {
		name, err := o.one(args, r.kind, r.arg)
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
}
