package publisher

import (
	"os/exec"
	"strings"
	"testing"
)

// The publisher stands apart from the subscriber: its build (tests aside)
// pulls in neither the flow package nor the source package.
func TestPublisherImportsNoSubscriberSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pubsubflow/pubsubflow/publisher").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/pubsubflow/pubsubflow/flow", "github.com/pubsubflow/pubsubflow/source":
			t.Errorf("publisher depends on %s", dep)
		}
	}
}
