// Command doccheck checks the module's doc comments, as ./scripts/test.sh
// runs it: every exported identifier has a doc comment that starts with
// its name; a doc comment that starts with another spelling of its own
// name (the name of a function since renamed or unexported) is stale; and
// a doc comment naming Type.Member or pkg.Name of this module names
// something that exists. It parses with go/ast only, so it needs no build.
//
//	go run ./scripts/doccheck [dir]
package main

import (
	"fmt"
	"os"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	problems, files, err := check(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("doccheck: %d problems in %d files\n", len(problems), files)
		os.Exit(1)
	}
	fmt.Printf("doccheck: ok (%d files)\n", files)
}
