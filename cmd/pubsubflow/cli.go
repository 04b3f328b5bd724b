package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad command, flag, argument or resource name
	// exitInterrupted: SIGINT or SIGTERM stopped demo, bench or publish
	// before it finished (128 + SIGINT, the shell's convention). tail and
	// emulator, which run until stopped, exit 0 then.
	exitInterrupted = 130
)

// Command groups of the main help.
const (
	groupRun   = "run"
	groupAdmin = "admin"
)

// The commands are listed in the order they are added, not sorted.
func init() { cobra.EnableCommandSorting = false }

// cliEnv is what a command may use of the process: its streams.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// usageError is a bad invocation: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// failure is an error of a command that ran: exit code 1. Every other
// error (ours before running, or cobra's own about the command line) is
// bad usage.
type failure struct{ error }

// errUsageShown is bad usage whose explanation was printed already.
var errUsageShown = errors.New("usage shown")

// run is the whole CLI: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-version" || args[0] == "-help") {
		args = append([]string{"-" + args[0]}, args[1:]...) // the flag package's spellings
	}
	root := rootCommand(cliEnv{stdin, stdout, stderr})
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	var f *failure
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled):
		// A signal stopped the command (main cancels ctx on SIGINT and
		// SIGTERM): the error is only the echo of that.
		fmt.Fprintf(stderr, "%s: interrupted\n", c.CommandPath())
		return exitInterrupted
	case errors.As(err, &f):
		fmt.Fprintf(stderr, "%s: %v\n", c.CommandPath(), f.error)
		return exitFailure
	case !errors.Is(err, errUsageShown):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", c.CommandPath(), err, c.CommandPath())
	}
	return exitUsage
}

// rootCommand is "pubsubflow", on env's streams.
func rootCommand(env cliEnv) *cobra.Command {
	root := &cobra.Command{
		Use:     "pubsubflow COMMAND [flags] [args]",
		Version: versionLine(),
		Long: `tail, publish, bench --subscription and the resource commands use
PUBSUB_EMULATOR_HOST when set, otherwise Pub/Sub with Application Default
Credentials. Flags go before or after the arguments. Exit codes: 0 ok,
1 failure, 2 bad usage, 130 interrupted (Ctrl-C) before demo, bench or
publish finished; tail and emulator stop with 0 on Ctrl-C.
'pubsubflow --version' prints the version, 'pubsubflow completion SHELL'
a completion script for bash, zsh, fish or powershell.

` + strings.TrimSpace(limitsHelp()),
		Args:          subcommandArgs,
		RunE:          missingCommand,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c) })
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(&cobra.Command{Use: "help [COMMAND]", Short: "help about any command",
		RunE: func(_ *cobra.Command, args []string) error { return help(root, args) }})
	root.AddGroup(&cobra.Group{ID: groupRun, Title: "Commands:"},
		&cobra.Group{ID: groupAdmin, Title: "Managing resources (connect like tail and publish):"})
	root.SetCompletionCommandGroupID(groupRun)
	root.AddCommand(demoCommand(), tailCommand(), publishCommand(), benchCommand(), emulatorCommand(),
		topicsCommand(), subscriptionsCommand(), snapshotsCommand(),
		&cobra.Command{Use: "version", Hidden: true, Args: nArgs(0, "no arguments"),
			Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), versionLine()) }})
	root.InitDefaultCompletionCmd() // now, to make it a group like ours
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Use, c.Short = "completion SHELL", "print a completion script for bash, zsh, fish or powershell"
		c.Args, c.RunE = subcommandArgs, missingCommand
	}
	return root
}

// newCommand is a command of the run group. use is its synopsis after
// "pubsubflow" ("tail [flags] SUBSCRIPTION"), short its line in the main
// help, long its description.
func newCommand(use, short, long string, args cobra.PositionalArgs, run func(context.Context, cliEnv, []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: strings.TrimSpace(long), GroupID: groupRun, Args: args, RunE: runs(run)}
}

// runs adapts a command's function to cobra: it gets the command's
// context and streams, and what it returns other than a usageError is a
// failure.
func runs(run func(context.Context, cliEnv, []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		err := run(c.Context(), cliEnv{c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr()}, args)
		var ue *usageError
		if err != nil && !errors.As(err, &ue) {
			return &failure{err}
		}
		return err
	}
}

// nArgs checks that a command has n positional arguments (what its usage
// calls them).
func nArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return usagef("missing %s", what)
		case len(args) > n:
			return usagef("unexpected arguments %q (want only %s)", args[n:], what)
		}
		return nil
	}
}

// subcommandArgs refuses a word that names no subcommand, suggesting the
// nearest ones; "GROUP help VERB" is help.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 || (c.HasParent() && args[0] == "help") {
		return nil
	}
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return &usageError{fmt.Sprintf("unknown command %q", args[0]) + didYouMean(args[0], names)}
}

// help prints the help of the command that args name below c: "pubsubflow
// help topics create", "pubsubflow topics help create".
func help(c *cobra.Command, args []string) error {
	c, rest, _ := c.Find(args)
	if err := subcommandArgs(c, rest); err != nil {
		return err
	}
	c.InitDefaultHelpFlag()
	return c.Help()
}

// missingCommand runs a command that has subcommands: with none it is bad
// usage and prints the help on stderr.
func missingCommand(c *cobra.Command, args []string) error {
	if len(args) > 0 { // "GROUP help [VERB]"
		return help(c, args[1:])
	}
	if c.HasParent() {
		fmt.Fprintf(c.ErrOrStderr(), "%s: missing command\n\n", c.CommandPath())
	}
	writeHelp(c.ErrOrStderr(), c)
	return errUsageShown
}

// writeHelp is every command's help: synopsis, commands, description,
// flags.
func writeHelp(w io.Writer, c *cobra.Command) {
	fmt.Fprintf(w, "Usage: %s\n", c.UseLine())
	groups := c.Groups()
	if len(groups) == 0 {
		groups = []*cobra.Group{{Title: "Commands:"}}
	}
	for _, g := range groups {
		var b strings.Builder
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() && s.GroupID == g.ID {
				fmt.Fprintf(&b, "  %-*s %s\n", s.NamePadding(), s.Name(), s.Short)
			}
		}
		if b.Len() > 0 {
			fmt.Fprintf(w, "\n%s\n%s", g.Title, b.String())
		}
	}
	if c.Long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Long))
	}
	c.InheritedFlags() // merges the connection flags of a resource group into c.Flags()
	if c.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", c.Flags().FlagUsagesWrapped(100))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nRun '%s COMMAND --help' for a command's flags.\n", c.CommandPath())
	}
}

// flagError words a flag's error as the flag package did (what scripts
// match) and suggests the flag meant by a mistyped or single-dash one.
func flagError(c *cobra.Command, err error) error {
	var (
		unknown *pflag.NotExistError
		invalid *pflag.InvalidValueError
		num     *strconv.NumError
	)
	switch {
	case errors.As(err, &unknown):
		typed, dashes := unknown.GetSpecifiedName(), "--"
		if s := unknown.GetSpecifiedShortnames(); s != "" {
			typed, dashes = s, "-" // "-max", taken for shorthands
		}
		var names []string
		c.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, "--"+f.Name) })
		return &usageError{"flag provided but not defined: " + dashes + typed + didYouMean("--"+typed, names)}
	case errors.As(err, &invalid):
		f, kind, cause := invalid.GetFlag(), "value", errors.Unwrap(invalid)
		switch {
		case f.Value.Type() == "bool":
			kind, cause = "boolean value", errors.New("want true or false")
		case errors.As(cause, &num) && errors.Is(num.Err, strconv.ErrSyntax):
			cause = errors.New("want an integer")
		}
		return usagef("invalid %s %q for flag --%s: %v", kind, invalid.GetValue(), f.Name, cause)
	}
	return &usageError{err.Error()}
}

// didYouMean lists the names nearest to what was typed (by edit distance,
// at most 2; a name that begins with it counting as 1), or is "".
func didYouMean(typed string, names []string) string {
	var near []string
	best := 2
	for _, n := range names {
		d := distance(typed, n)
		if strings.HasPrefix(n, typed) {
			d = min(d, 1)
		}
		if d < best {
			best, near = d, nil
		}
		if d == best {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		return ""
	}
	return "\n\nDid you mean this?\n\t" + strings.Join(near, "\n\t")
}

// distance is the edit distance between a and b (insertions, deletions
// and substitutions of bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range len(a) {
		cur := []int{i + 1}
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			cur = append(cur, min(prev[j]+cost, prev[j+1]+1, cur[j]+1))
		}
		prev = cur
	}
	return prev[len(b)]
}
