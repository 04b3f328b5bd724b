package readme

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSnippetsCompiled checks that every Go snippet in the README appears
// here, line for line (indentation aside), so that the build compiles
// what a reader copies.
func TestSnippetsCompiled(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile("snippets.go")
	if err != nil {
		t.Fatal(err)
	}
	here := dedent(string(code))
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go snippet found in the README")
	}
	for _, b := range blocks {
		if !strings.Contains(here, dedent(b[1])) {
			t.Errorf("README snippet not in snippets.go (copy it there so it compiles):\n%s", b[1])
		}
	}
}

// dedent drops each line's leading tabs.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, "\t")
	}
	return strings.Join(lines, "\n")
}
