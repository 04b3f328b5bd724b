package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// versionLine is what --version prints: the module version the binary was
// built from ("(devel)" for a build from a checkout, with its commit when
// known) and the Go version.
func versionLine() string {
	v, rev := "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("pubsubflow %s%s %s", v, rev, runtime.Version())
}

// limitsHelp lists the service's limits (the same table the library checks).
func limitsHelp() string {
	var b strings.Builder
	b.WriteString("The service's limits (checked before anything is sent):\n")
	for _, l := range limits.Table {
		fmt.Fprintf(&b, "  %-28s %s\n", l.Name, l.Value)
	}
	return b.String()
}
