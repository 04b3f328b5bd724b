package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
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

// cliEnv is what a command may use of the process: its streams.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	// usage is the synopsis and description printed above the flags.
	usage string
	// flags declares the command's flags on fs and returns the function
	// that runs it with the positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, env cliEnv, args []string) error
}

func commands() []command {
	return []command{demoCommand(), tailCommand(), publishCommand(), benchCommand(), emulatorCommand()}
}

// usageError is a bad invocation: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run is the whole CLI: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := cliEnv{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		mainUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return run(ctx, append(append([]string(nil), args[1:]...), "--help"), stdin, stdout, stderr)
		}
		mainUsage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return runCommand(ctx, c, args[1:], env)
		}
	}
	for _, g := range groups() {
		if g.name == args[0] {
			return runGroup(ctx, g, args[1:], env)
		}
	}
	fmt.Fprintf(stderr, "pubsubflow: unknown command %q\n\n", args[0])
	mainUsage(stderr)
	return exitUsage
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: pubsubflow COMMAND [flags] [args]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	groupsUsage(w)
	fmt.Fprintf(w, "\nRun 'pubsubflow COMMAND --help' for a command's flags, 'pubsubflow --version'\n"+
		"for the version. tail and publish use PUBSUB_EMULATOR_HOST when set, otherwise\n"+
		"Pub/Sub with Application Default Credentials. Exit codes: 0 ok, 1 failure,\n"+
		"2 bad usage, 130 interrupted (Ctrl-C) before demo, bench or publish finished;\n"+
		"tail and emulator stop with 0 on Ctrl-C.\n\n%s", limitsHelp())
}

// flagSet returns c's flags and the function that runs it.
func (c command) flagSet() (*flag.FlagSet, func(context.Context, cliEnv, []string) error) {
	fs := flag.NewFlagSet("pubsubflow "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print errors and usage ourselves
	return fs, c.flags(fs)
}

func runCommand(ctx context.Context, c command, args []string, env cliEnv) int {
	fs, exec := c.flagSet()
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(env.stdout, c, fs)
		return exitOK
	}
	if err == nil {
		err = exec(ctx, env, pos)
	}
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled):
		// A signal stopped the command (main cancels ctx on SIGINT and
		// SIGTERM): the error is only the echo of that.
		fmt.Fprintf(env.stderr, "pubsubflow %s: interrupted\n", c.name)
		return exitInterrupted
	case errors.As(err, &ue) || isFlagError(err):
		fmt.Fprintf(env.stderr, "pubsubflow %s: %v\n", c.name, err)
		fmt.Fprintf(env.stderr, "Run 'pubsubflow %s --help' for usage.\n", c.name)
		return exitUsage
	default:
		fmt.Fprintf(env.stderr, "pubsubflow %s: %v\n", c.name, err)
		return exitFailure
	}
}

// flagError marks an error from flag parsing (exit code 2).
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func isFlagError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe)
}

func commandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nFlags:\n", strings.TrimSpace(c.usage))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments (the flag package stops at the first
// positional one), and returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &flagError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// "--" ends the flags: everything after it is positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments.
func wantArgs(args []string, n int, what string) error {
	switch {
	case len(args) < n:
		return usagef("missing %s", what)
	case len(args) > n:
		return usagef("unexpected arguments %q (want only %s)", args[n:], what)
	}
	return nil
}
