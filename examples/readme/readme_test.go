package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSnippetsCompiled checks that every Go snippet in the README
// appears, line for line (indentation aside), here or in an example's
// code, so that the build compiles what a reader copies — and, for an
// example's code (the go-streams topology), its tests run exactly it.
func TestSnippetsCompiled(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../examples/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "snippets.go")
	var code []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue // a snippet must be code a reader runs, not a test's
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code = append(code, dedent(string(b)))
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go snippet found in the README")
	}
	for _, b := range blocks {
		if !containsAny(code, dedent(b[1])) {
			t.Errorf("README snippet not in snippets.go nor in an example's code (copy it there so it compiles):\n%s", b[1])
		}
	}
}

// containsAny reports whether one of files contains s.
func containsAny(files []string, s string) bool {
	for _, f := range files {
		if strings.Contains(f, s) {
			return true
		}
	}
	return false
}

// dedent drops each line's leading tabs.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, "\t")
	}
	return strings.Join(lines, "\n")
}
