package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleDocs is the check ./scripts/test.sh runs, on this module.
func TestModuleDocs(t *testing.T) {
	problems, files, err := check("../..")
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d files: not the module root", files)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestPlantedMistakes plants each kind of stale doc in a small module and
// checks that each is reported, and that the correct docs beside them are
// not.
func TestPlantedMistakes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("lane/lane.go", `// Package lane is a fixture.
package lane

// Gate counts lanes.
type Gate struct{ open int }

// Open opens a lane (see Gate.Close, removed).
func (g *Gate) Open() {}

// CloseLane records that a lane ended.
func (g *Gate) closeLane() {}

// Len is the number of lanes.
func (g *Gate) count() int { return g.open }

// Wake wakes waiters; HandOff was its old name.
func Wake() {}

func Undocumented() {}

// Counts the lanes.
func Count() int { return 0 }
`)
	write("user/user.go", `// Package user is a fixture.
package user

import "example.com/m/lane"

// Use calls lane.Wake and lane.Sleep.
func Use() { lane.Wake() }
`)
	problems, _, err := check(dir)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		`names Gate.Close: Gate has no field or method Close`,
		`closeLane: doc starts with "CloseLane", another spelling of its name (stale)`,
		`count: doc describes "Len", which is not its name (stale)`,
		`names HandOff, which the module does not declare`,
		`Undocumented: exported and undocumented`,
		`Count: doc does not start with its name`,
		`names lane.Sleep: package example.com/m/lane has no Sleep`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
	// CloseLane is reported twice: as a stale start and as a bare name.
	if len(problems) != 8 {
		t.Errorf("%d problems, want 8:\n%s", len(problems), all)
	}
}
